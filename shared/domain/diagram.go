package domain

import (
	"fmt"
	"strings"
)

// The state diagrams are generated documentation: docs/states.md, and the
// section of docs/architecture.md between its generated markers. `go
// generate ./shared/domain` rewrites both; TestStatesDoc fails when either
// is stale.
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
