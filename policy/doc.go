// Package policy decides hearth's guardrails: whether a create of a
// sandbox is admitted, with which TTL, and the per-identity create-rate
// alarm and circuit breaker. Every function is pure: its answer depends
// only on its arguments (request, usage, limits, and the time it is
// given); it reads no clock, does no I/O and keeps no state. Callers
// (package lifecycle) bring the data and keep each identity's Rate.
//
// # Limits
//
// Defaults are: agent quota 5, agent share 10%, budget 25%, max TTL 24h,
// idle timeout 10m, alarm at 10 creates per minute, breaker factor 3,
// breaker cool-down 5m. A tenant's sandbox.PolicyOverrides replace them
// field by field (Limits.With); each set field must be in range (agent
// quota 1..1000, percents 1..100, max TTL 1m..720h, idle timeout
// 1s..720h, alarm 1..10000, factor 1..100, cool-down 1s..24h), else With
// fails with invalid_argument naming the field ("policy.agent_quota must
// be between 1 and 1000, got 0") and details min, max and got.
//
// # Admission of a create
//
// The tenant's budget is BudgetPercent of its allocation in CPU, memory
// and disk (rounded down). An identity's quota is AgentQuota, capped at
// AgentSharePercent of how many default-size sandboxes fit in the budget
// and never below 1. AdmitCreate checks, in this order:
//
//   - TTL: 0 means MaxTTL; a negative TTL, or one over MaxTTL (MaxTTL
//     itself is allowed), is invalid_argument.
//   - Quota: the identity may hold quota sandboxes; a create while it holds
//     quota or more is quota_exceeded, with details limit and used.
//   - Budget: the tenant's sandboxes plus this one may use up to the budget
//     in each of cpu, memory and disk (exactly the budget is allowed); the
//     first dimension over it, in that order, is budget_exceeded with
//     details resource, limit, used and requested (millicpu or bytes).
//
// # Create rate and circuit breaker
//
// Each identity's creates are counted over a sliding window of 60 s,
// (now-60s, now]: a create at t is out of the window at t+60s. With
// T = AlarmCreatesPerMinute and trip = BreakerFactor × T, and count =
// the creates admitted in the window plus this one:
//
//   - Closed: a create is admitted while count ≤ trip. An admitted create
//     with count ≥ T raises the alarm, unless one was raised less than 60 s
//     before (so the T-th create in a minute alarms, and a rate that stays
//     high alarms again a minute later). A create with count > trip is
//     refused with circuit_open and opens the breaker (Tripped) until
//     now + BreakerCooldown.
//   - Open (now < OpenUntil): every create is refused with circuit_open,
//     details retry_after_seconds (the time to OpenUntil rounded up to the
//     second, at least 1), limit and used (those of the trip).
//   - Half-open from OpenUntil on: the window is emptied on entering it. A
//     create is admitted while count ≤ T (raising the alarm as when
//     closed); one with count > T re-opens the breaker for another
//     cool-down (Tripped). A full 60 s after it half-opened without
//     re-opening, the breaker is closed.
//
// Refused creates are not counted. Admit returns the new Rate, which the
// caller keeps in place of the old; it never writes to the old one's
// Recent, so copies may share it.
package policy
