package chaos

import (
	"fmt"
	"testing"
)

func TestTmpPlanMix(t *testing.T) {
	for _, seed := range []uint64{1, 2, 3, 7, 8} {
		f := New(seed, DefaultProbabilities())
		m := map[string]int{}
		for _, p := range f.Plan(30) {
			m[p.Kind]++
			if p.Race != nil {
				fmt.Println(seed, p.N, p.Kind, string(p.Body), p.Race)
			}
		}
		fmt.Println(seed, m)
	}
}
