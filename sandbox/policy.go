package sandbox

// ReasonDenied: the policy refused the call, or its approval was refused
// or timed out; nothing ran. The exit code is ExitNotExecutable (126), the
// Result's Error the reason the policy gave.
const ReasonDenied ExitReason = "denied"

// DeniedResult is the result of a call the policy refused.
func DeniedResult(reason string) *Result {
	return &Result{ExitCode: ExitNotExecutable, ExitReason: ReasonDenied, Error: reason, TimeToFirstOutputMs: -1}
}
