package domain

import (
	"fmt"
	"strings"
)

// Diagram renders the transition tables as Mermaid state diagrams, the
// generated documentation of docs/states.md (go test ./shared/domain -update
// rewrites it; a test fails when it is stale).
func Diagram() string {
	var b strings.Builder
	b.WriteString("# stepflow states\n\nGenerated from `shared/domain/transition.go` by `go test ./shared/domain -run TestStatesDoc -update`; do not edit.\n\n")
	b.WriteString("## Step\n\n```mermaid\nstateDiagram-v2\n    [*] --> PENDING\n")
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
	b.WriteString("```\n\n## Job\n\n```mermaid\nstateDiagram-v2\n")
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
	b.WriteString("```\n\n## Attempt\n\n")
	var states []string
	for _, s := range AllAttemptStates() {
		states = append(states, "`"+string(s)+"`")
	}
	b.WriteString("An attempt is " + strings.Join(states, ", ") + "; it starts `running` when its lease is taken and ends once.\n")
	return b.String()
}
