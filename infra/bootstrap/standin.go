package bootstrap

import "fmt"

// StandInEnv resolves the functions' environment (Globals.Function) as
// Provision would for a stack of this name, creating nothing: each table,
// queue, state machine, bucket and event bus stands in under the name
// Provision would give it, with an ARN in the emulator's account. A stack
// that keeps the engine's state in memory instead (localstack/embedded)
// reads every other setting from it, the parameters' values among them,
// as a provisioned stack's functions do.
func (t *Template) StandInEnv(stack string) (map[string]string, error) {
	if !stackNameRE.MatchString(stack) {
		return nil, fmt.Errorf("stack name %q must match %s (CloudFormation's rule)", stack, stackNameRE)
	}
	if err := t.checkSupport(); err != nil {
		return nil, err
	}
	r := newResolver(t, stack)
	for _, typ := range []string{typeTable, typeQueue, typeStateMachine, typeBucket, typeEventBus} {
		for _, id := range t.ids(typ) {
			name := stack + "-" + id
			r.refs[id], r.arns[id], r.names[id] = name, fmt.Sprintf("arn:aws:local:us-east-1:%s:%s", defaultAccount, name), name
		}
	}
	env, err := r.env(envVars(t.globalFn))
	if err != nil {
		return nil, fmt.Errorf("Globals.Function environment: %w", err)
	}
	return env, nil
}
