package sandbox

// ValidateNodeName checks the name of a node, one daemon (`hearth serve
// --node`) of the deployment whose daemons share a store: a DNS label, as
// ValidateName's rules say (1–63 characters of lowercase letters, digits
// and '-', starting and ending with a letter or digit), so that it can
// name the node in hosts, logs and metrics as it is. The error is
// invalid_argument, names the node name and says which rule failed.
func ValidateNodeName(name string) error { return validateLabel("node name", name, "node-1") }
