package instance

// Internals the external tests reach.
var (
	DerivedName = derivedName
	// OpenWith is Open with uses standing in for the host's check of a
	// slot's link prefix and subnet.
	OpenWith = open
)

// HostUses is the host's check of a slot's link prefix and subnet.
var HostUses = hostUses
