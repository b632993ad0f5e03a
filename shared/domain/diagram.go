package domain

import (
	"fmt"
	"strings"
)

// The state diagrams are generated documentation: docs/states.md, and the
// section of docs/architecture.md between its generated markers; so are
// docs/model.md's job table and its list of the formal table's widenings.
// `go generate ./shared/domain` rewrites them; TestStatesDoc fails when
// one is stale.
//go:generate go test -run TestStatesDoc -update .

// Diagram renders the transition tables as Mermaid state diagrams: the
// whole of docs/states.md.
func Diagram() string {
	var b strings.Builder
	b.WriteString("# stepflow states\n\nGenerated from `shared/domain/transition.go` by `go generate ./shared/domain`; do not edit.\n\n")
	b.WriteString("## Step\n\n" + StepDiagram() + "\n## Job\n\n" + JobDiagram() + "\n## Attempt\n\n")
	var states []string
	for _, s := range AllAttemptStates() {
		states = append(states, "`"+string(s)+"`")
	}
	b.WriteString("An attempt is " + strings.Join(states, ", ") + "; it starts `running` when its lease is taken and ends once.\n")
	return b.String()
}

// StepDiagram renders the step transition table as a Mermaid block.
func StepDiagram() string {
	var b strings.Builder
	b.WriteString("```mermaid\nstateDiagram-v2\n    [*] --> PENDING\n")
	for _, t := range stepTransitions {
		for _, s := range t.Sources {
			fmt.Fprintf(&b, "    %s --> %s: %s\n", s, t.Destination, t.Event)
		}
	}
	for _, s := range AllStepStates() {
		if s.Terminal() {
			fmt.Fprintf(&b, "    %s --> [*]\n", s)
		}
	}
	b.WriteString("```\n")
	return b.String()
}

// JobDiagram renders the job transition table as a Mermaid block.
func JobDiagram() string {
	var b strings.Builder
	b.WriteString("```mermaid\nstateDiagram-v2\n")
	for _, t := range jobTransitions {
		for _, s := range t.Sources {
			from := string(s)
			if s == JobInitial {
				from = "[*]"
			}
			fmt.Fprintf(&b, "    %s --> %s: %s\n", from, t.Destination, t.Event)
		}
	}
	for _, s := range AllJobStates() {
		if s.Terminal() {
			fmt.Fprintf(&b, "    %s --> [*]\n", s)
		}
	}
	b.WriteString("```\n")
	return b.String()
}

// JobTableDoc renders the canonical job table as docs/model.md's Markdown
// table: each event, the states it leaves, where it leads.
func JobTableDoc() string {
	var b strings.Builder
	b.WriteString("| event | from | to |\n|---|---|---|\n")
	for _, t := range jobTransitions {
		var from []string
		for _, s := range t.Sources {
			from = append(from, docState(s))
		}
		fmt.Fprintf(&b, "| `%s` | %s | `%s` |\n", t.Event, strings.Join(from, ", "), t.Destination)
	}
	return b.String()
}

// WideningsDoc renders the widenings of the formal job table as
// docs/model.md's Markdown table, with the lifecycle row each one serves.
func WideningsDoc() string {
	var b strings.Builder
	b.WriteString("| added pair | required by | what makes it |\n|---|---|---|\n")
	for _, w := range jobWidenings {
		fmt.Fprintf(&b, "| `%s --%s--> %s` | %s: %s | %s |\n", w.From, w.Event, w.To, w.Lifecycle, w.Row, w.Why)
	}
	return b.String()
}

func docState(s JobState) string {
	if s == JobInitial {
		return "(initial)"
	}
	return "`" + string(s) + "`"
}
