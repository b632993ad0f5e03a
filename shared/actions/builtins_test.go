package actions

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/shared/domain"
)

// unrunnable answers why an action type of kinds is built in yet nothing
// here runs it, or has a run yet is not built in (a worker's runs on
// workers; a waiting type's never).
func unrunnable(kinds []domain.ActionKind) error {
	for _, k := range kinds {
		_, pure := k.(domain.PureAction)
		_, io := builtins[k.Name()]
		switch {
		case k.Executor() == domain.ExecutorBuiltIn && !pure && !io:
			return fmt.Errorf("action type %q is built in, yet neither its domain type (domain.PureAction) nor builtins runs it", k.Name())
		case k.Executor() != domain.ExecutorBuiltIn && (pure || io):
			return fmt.Errorf("action type %q is not built in, yet it has a built-in run", k.Name())
		case pure && io:
			return fmt.Errorf("action type %q runs both in the domain and in builtins", k.Name())
		}
	}
	return nil
}

// Every registered action type is either run here or declared not built
// in, and builtins names only registered built-in types.
func TestEveryBuiltInActionRuns(t *testing.T) {
	t.Parallel()
	require.NoError(t, unrunnable(domain.ActionKinds()))
	for name := range builtins {
		k, ok := domain.LookupAction(name)
		require.True(t, ok, "builtins runs %q, which no domain type is", name)
		require.Equal(t, domain.ExecutorBuiltIn, k.Executor(), name)
	}
}

// unrunAction is an action type registered without a run.
type unrunAction struct{}

func (unrunAction) Name() string                                          { return "unrun" }
func (unrunAction) Executor() domain.Executor                             { return domain.ExecutorBuiltIn }
func (unrunAction) Validate(*domain.ActionSpec, domain.ActionCheck) error { return nil }

func TestABuiltInActionWithoutARunIsCaught(t *testing.T) {
	t.Parallel()
	require.EqualError(t, unrunnable(append(domain.ActionKinds(), unrunAction{})),
		`action type "unrun" is built in, yet neither its domain type (domain.PureAction) nor builtins runs it`)
}
