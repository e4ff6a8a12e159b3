package server

import (
	"crypto/subtle"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"regexp"
	"strings"
)

// The guard keeps web pages the user happens to visit from driving the server. A browser lets
// any page send a "simple" cross-site POST (Content-Type text/plain needs no preflight) and
// lets a page whose own host name was rebound to 127.0.0.1 read the answers; neither kind of
// request can be told from a local client by its body, only by its Origin and Host headers.
// Clients that are not browsers send no Origin and are let through.

// defaultOrigins are the origins a browser page may call from without DFLASH_ORIGINS: pages
// served from this machine's loopback names, on any port.
var defaultOrigins = []string{
	"http://localhost", "https://localhost", "http://localhost:*", "https://localhost:*",
	"http://127.0.0.1", "https://127.0.0.1", "http://127.0.0.1:*", "https://127.0.0.1:*",
	"http://[::1]", "https://[::1]", "http://[::1]:*", "https://[::1]:*",
}

// OriginsFromEnv returns the extra allowed origins in DFLASH_ORIGINS, a comma-separated list of
// origins in which "*" matches any run of characters ("*" alone allows every origin).
func OriginsFromEnv() []string {
	var out []string
	for _, o := range strings.Split(os.Getenv("DFLASH_ORIGINS"), ",") {
		if o = strings.TrimSpace(o); o != "" {
			out = append(out, o)
		}
	}
	return out
}

// globMatch reports whether s matches pattern, where each "*" matches any run of characters.
func globMatch(pattern, s string) bool {
	parts := strings.Split(pattern, "*")
	if len(parts) == 1 {
		return pattern == s
	}
	if !strings.HasPrefix(s, parts[0]) {
		return false
	}
	s = s[len(parts[0]):]
	last := parts[len(parts)-1]
	for _, p := range parts[1 : len(parts)-1] {
		i := strings.Index(s, p)
		if i < 0 {
			return false
		}
		s = s[i+len(p):]
	}
	return len(s) >= len(last) && strings.HasSuffix(s, last)
}

func (s *Server) originAllowed(origin string) bool {
	origin = strings.ToLower(origin)
	for _, p := range s.origins {
		if globMatch(strings.ToLower(p), origin) {
			return true
		}
	}
	return false
}

// isLoopback reports whether a listen address (host:port or host) accepts only local
// connections. The unspecified address (0.0.0.0, ::) is not loopback: it listens everywhere.
func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = addr
	}
	host = strings.Trim(host, "[]")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}

// hostAllowed reports whether a request's Host header may reach a loopback-bound server. A DNS
// rebinding attack needs a host name the attacker controls, so loopback names, this machine's
// own name and IP literals (a browser sends an IP only when the page asked for that IP, which
// the origin check then covers) are the names allowed.
func hostAllowed(host string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.ToLower(strings.TrimSuffix(strings.Trim(host, "[]"), "."))
	if host == "" || host == "localhost" || strings.HasSuffix(host, ".localhost") {
		return true
	}
	if _, err := netip.ParseAddr(host); err == nil {
		return true
	}
	if name, err := os.Hostname(); err == nil && name != "" {
		name = strings.ToLower(name)
		return host == name || host == name+".local"
	}
	return false
}

// corsAllowHeaders are the request headers a preflight allows when it names none: what the
// ollama and OpenAI client libraries send.
const corsAllowHeaders = "Authorization, Content-Type, Accept, User-Agent, X-Requested-With"

// guard refuses requests by Host (when bound to loopback), Origin and API key, answers CORS
// preflights for allowed origins and marks allowed cross-origin answers readable. It reports
// whether next should run.
func (s *Server) guard(w http.ResponseWriter, r *http.Request) bool {
	if s.loopback.Load() && !hostAllowed(r.Host) {
		s.refuse(w, r, &RequestError{Status: http.StatusForbidden,
			Msg: fmt.Sprintf("host %q is not allowed: the server listens on a loopback address and answers only local host names", r.Host)})
		return false
	}
	origin := r.Header.Get("Origin")
	if origin != "" {
		if !s.originAllowed(origin) {
			s.refuse(w, r, &RequestError{Status: http.StatusForbidden,
				Msg: fmt.Sprintf("origin %q is not allowed (add it to DFLASH_ORIGINS to let its pages call this server)", origin)})
			return false
		}
		h := w.Header()
		h.Set("Access-Control-Allow-Origin", origin)
		h.Add("Vary", "Origin")
		if r.Method == http.MethodOptions && r.Header.Get("Access-Control-Request-Method") != "" {
			// A preflight carries no credentials, so it is answered before the key check.
			allow := r.Header.Get("Access-Control-Request-Headers")
			if allow == "" {
				allow = corsAllowHeaders
			}
			h.Set("Access-Control-Allow-Methods", "GET, POST, HEAD, OPTIONS")
			h.Set("Access-Control-Allow-Headers", allow)
			h.Set("Access-Control-Max-Age", "600")
			w.WriteHeader(http.StatusNoContent)
			return false
		}
	}
	if s.cfg.APIKey != "" && r.URL.Path != "/health" && !s.keyMatches(r) {
		w.Header().Set("WWW-Authenticate", `Bearer realm="dflash"`)
		s.refuse(w, r, &RequestError{Status: http.StatusUnauthorized, Code: "invalid_api_key",
			Msg: "missing or wrong API key: send \"Authorization: Bearer <key>\""})
		return false
	}
	return true
}

func (s *Server) keyMatches(r *http.Request) bool {
	auth := r.Header.Get("Authorization")
	const prefix = "Bearer "
	if len(auth) < len(prefix) || !strings.EqualFold(auth[:len(prefix)], prefix) {
		return false
	}
	got := strings.TrimSpace(auth[len(prefix):])
	return subtle.ConstantTimeCompare([]byte(got), []byte(s.cfg.APIKey)) == 1
}

// refuse answers re in the framing of the API the path belongs to.
func (s *Server) refuse(w http.ResponseWriter, r *http.Request, re *RequestError) {
	info(r).err = re.Msg
	if strings.HasPrefix(r.URL.Path, "/v1/") {
		writeOpenAIError(w, re)
		return
	}
	writeJSON(w, re.Status, map[string]string{"error": re.Msg})
}

// exposureWarning is logged when the server listens beyond this machine without an API key.
func exposureWarning(addr string, apiKey string) string {
	if apiKey != "" || isLoopback(addr) {
		return ""
	}
	return "listening on a non-loopback address without an API key: anyone who can reach " + addr +
		" can generate and unload models (set --api-key or DFLASH_API_KEY)"
}

// pathToken finds file paths in error text: an absolute, home- or dot-relative path (or a
// Windows drive path) that starts a word.
var pathToken = regexp.MustCompile(`(^|[\s"'(=\[])((?:[A-Za-z]:)?(?:~|\.{1,2})?[\\/][^\s"'()\[\],;:]*)`)

// redactPaths replaces each file path in msg by its last element, so an error sent to a client
// names the file at fault without telling it how the server's disk is laid out.
func redactPaths(msg string) string {
	return pathToken.ReplaceAllStringFunc(msg, func(m string) string {
		sub := pathToken.FindStringSubmatch(m)
		lead, path := sub[1], sub[2]
		base := path[strings.LastIndexAny(path, `/\`)+1:]
		if base == "" {
			return m
		}
		return lead + base
	})
}
