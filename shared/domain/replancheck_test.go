package domain

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// checkReplansOneByOne is what Validate did before checkReplans: each
// replan built into the job and searched for a cycle.
func checkReplansOneByOne(specs []StepSpec, graph bool) error {
	for i := range specs {
		if err := checkReplan(specs, graph, i, specs[i].Action.Steps, fmt.Sprintf("steps[%d].action.steps", i)); err != nil {
			return err
		}
	}
	return nil
}

// randomReplans makes steps with replans (and replans of replans) whose
// ids and dependencies are drawn from a small pool: fine ones, and ones
// that repeat an id, name no step, themselves, the replaced step or one
// twice, or close a cycle.
func randomReplans(r *rand.Rand, pool []string, depth int) []StepSpec {
	steps := make([]StepSpec, 1+r.IntN(3))
	for k := range steps {
		st := StepSpec{ID: pool[r.IntN(len(pool))]}
		for range r.IntN(3) {
			st.DependsOn = append(st.DependsOn, pool[r.IntN(len(pool))])
		}
		if depth < 3 && r.IntN(3) == 0 {
			st.Action.Steps = randomReplans(r, pool, depth+1)
		}
		steps[k] = st
	}
	return steps
}

// checkReplans answers what checking each replan by building it answers,
// on every spec: the same error, or none.
func TestCheckReplansAnswersAsEachReplanBuilt(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(7, 11))
	var pool []string
	for i := range 12 {
		pool = append(pool, fmt.Sprintf("s%d", i), fmt.Sprintf("n%d", i))
	}
	pool = append(pool, "bad id")
	fine := 0
	for range 20000 {
		n := 1 + r.IntN(8)
		graph := r.IntN(2) == 0
		specs := make([]StepSpec, n)
		index := map[string]int{}
		for i := range specs {
			specs[i].ID = fmt.Sprintf("s%d", i)
			index[specs[i].ID] = i
			if graph && i > 0 {
				for _, d := range r.Perm(i)[:r.IntN(min(i, 3)+1)] {
					specs[i].DependsOn = append(specs[i].DependsOn, specs[d].ID)
				}
			}
			if r.IntN(2) == 0 {
				specs[i].Action.Steps = randomReplans(r, pool, 1)
			}
		}
		want := checkReplansOneByOne(specs, graph)
		got := checkReplans(specs, graph, index)
		if want == nil {
			fine++
			require.NoError(t, got, "%+v", specs)
			continue
		}
		require.EqualError(t, got, want.Error(), "%+v", specs)
	}
	require.Greater(t, fine, 2000, "enough specs whose replans all fit")
}

// A spec of as many steps as leave room for a replan, all carrying one
// whose new step waits on the step before the one it replaces, is
// accepted, and one such replan that closes a cycle refused. (How fast it
// is checked is BenchmarkParseBigJob's: building each replan took
// minutes.)
func TestManyReplansAreCheckedAtOnce(t *testing.T) {
	t.Parallel()
	for _, graph := range []bool{false, true} {
		steps := make([]string, MaxSteps-1)
		for i := range steps {
			deps := ""
			if graph && i > 0 {
				deps = fmt.Sprintf(`,"depends_on":["s%d"]`, i-1)
			}
			steps[i] = fmt.Sprintf(`{"id":"s%d","action":{"type":"fail","class":"replan","message":"m","steps":[{"id":"r%d","action":{"type":"pass"},"depends_on":["s%d"]}]}%s}`, i, i, max(i-1, 0), deps)
		}
		steps[0] = strings.Replace(steps[0], `,"depends_on":["s0"]`, "", 1)
		_, err := ParseJobSpec([]byte(`{"steps":[` + strings.Join(steps, ",") + `]}`))
		require.NoError(t, err)

		// One that closes a cycle is refused as it always was: r1 waits
		// on s2, which waits on s1, which r1 replaces.
		steps[1] = strings.Replace(steps[1], `"depends_on":["s0"]}]`, `"depends_on":["s2"]}]`, 1)
		_, err = ParseJobSpec([]byte(`{"steps":[` + strings.Join(steps, ",") + `]}`))
		requireField(t, err, "steps[1].action.steps[0].depends_on[0]", "a cycle")
	}
}

// onCycleByRounds is onCycle as it peeled before: round after round,
// each over every step left.
func onCycleByRounds(steps []StepSpec, index map[string]int) []int {
	stuck := unordered(steps, index)
	if len(stuck) == 0 {
		return nil
	}
	in := map[int]bool{}
	for _, i := range stuck {
		in[i] = true
	}
	for changed := true; changed; {
		changed = false
		needed := map[int]bool{}
		for i := range in {
			for _, d := range steps[i].DependsOn {
				needed[index[d]] = true
			}
		}
		for i := range in {
			if !needed[i] {
				delete(in, i)
				changed = true
			}
		}
	}
	var out []int
	for _, i := range stuck {
		if in[i] {
			out = append(out, i)
		}
	}
	return out
}

// onCycle finds the steps it found before, on graphs with cycles, steps
// behind them, beside them and between two.
func TestOnCycleFindsWhatItFoundByRounds(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(3, 5))
	cycles := 0
	for range 20000 {
		steps := make([]StepSpec, 1+r.IntN(10))
		index := map[string]int{}
		for i := range steps {
			steps[i].ID = fmt.Sprintf("s%d", i)
			index[steps[i].ID] = i
		}
		for i := range steps {
			for range r.IntN(3) {
				steps[i].DependsOn = append(steps[i].DependsOn, steps[r.IntN(len(steps))].ID)
			}
		}
		want := onCycleByRounds(steps, index)
		if len(want) > 0 {
			cycles++
		}
		require.Equal(t, want, onCycle(steps, index), "%+v", steps)
	}
	require.Greater(t, cycles, 2000)
}
