package lifecycle

import (
	"context"
)

// Counts returns how many sandboxes there are per tenant and status, keyed
// by [tenant, status], as an operator's List sees them (warm-pool members
// are not counted), for the sandboxes gauge of /metrics. A tenant and
// status with no sandbox has no entry.
func (s *Sandboxes) Counts(ctx context.Context) (map[[2]string]int, error) {
	list, err := s.List(ctx, operatorPrincipal())
	if err != nil {
		return nil, err
	}
	counts := map[[2]string]int{}
	for _, sb := range list {
		counts[[2]string{sb.Tenant, string(sb.Status)}]++
	}
	return counts, nil
}
