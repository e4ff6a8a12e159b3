package server_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/dflash/dflash/server"
	"github.com/dflash/dflash/server/fake"
)

// A backend that cannot pull answers /api/pull with 501 and says so; a pull without a model is
// a 400 naming the field. (Pulling itself is tested over the real backend, server/backend.)
func TestPullWithoutPuller(t *testing.T) {
	_, url := startServer(t, server.Config{}, &fake.Backend{})
	r := post(t, url+"/api/pull", `{"model":"Qwen/Qwen3-0.6B"}`)
	if r.status != http.StatusNotImplemented || !strings.Contains(string(r.body), "cannot pull") {
		t.Errorf("pull on a fake backend: %d %s", r.status, r.body)
	}
	r = post(t, url+"/api/pull", `{}`)
	if r.status != http.StatusBadRequest || !strings.Contains(string(r.body), "model") {
		t.Errorf("pull without a model: %d %s", r.status, r.body)
	}
}
