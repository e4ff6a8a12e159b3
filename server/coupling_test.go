package server_test

import (
	"testing"

	"github.com/dflash/dflash/server"
	"github.com/dflash/dflash/server/fake"
)

// TestCouplingPolicy: the server decides per request whether the backend samples coupled. By
// default (the zero Config) a request that gives a seed is coupled, one that does not is not;
// "always" and "never" override that, and the OpenAI endpoint follows the same rule.
func TestCouplingPolicy(t *testing.T) {
	for _, tc := range []struct {
		policy            string
		seeded, notSeeded bool
	}{{"", true, false}, {"seeded", true, false}, {"always", true, true}, {"never", false, false}} {
		c, err := server.ParseCoupling(tc.policy)
		if err != nil {
			t.Fatal(err)
		}
		b := &fake.Backend{}
		_, url := startServer(t, server.Config{Coupling: c}, b)
		for _, rc := range []struct {
			path, body string
			want       bool
		}{
			{"/api/generate", `{"model": "fake", "prompt": "hi", "stream": false, "options": {"seed": 3}}`, tc.seeded},
			{"/api/generate", `{"model": "fake", "prompt": "hi", "stream": false}`, tc.notSeeded},
			{"/v1/completions", `{"model": "fake", "prompt": "hi", "seed": 3}`, tc.seeded},
			{"/v1/completions", `{"model": "fake", "prompt": "hi"}`, tc.notSeeded},
		} {
			if r := post(t, url+rc.path, rc.body); r.status != 200 {
				t.Fatalf("%s %s: %d %s", rc.path, rc.body, r.status, r.body)
			}
			o, ok := b.LastOptions()
			if !ok || o.Coupled != rc.want {
				t.Errorf("policy %q, %s %s: coupled %v, want %v", tc.policy, rc.path, rc.body, o.Coupled, rc.want)
			}
		}
	}
	if _, err := server.ParseCoupling("sometimes"); err == nil {
		t.Fatal("ParseCoupling accepted \"sometimes\"")
	}
}
