package server

import (
	"net/http"
	"slices"
)

// RouteMethods returns every path h serves on its listener, each with the
// methods it takes, read from h's own routing table.
func (h *Handler) RouteMethods() map[string][]string {
	out := map[string][]string{"/healthz": slices.Clone(healthzMethods)}
	for path, rt := range h.routes {
		out[path] = append(out[path], rt.method)
	}
	return out
}

// ProbePatterns returns the ServeMux patterns NewProbes registers.
func ProbePatterns() []string {
	var out []string
	for p := range probeRoutes(nil, 0) {
		out = append(out, p)
	}
	slices.Sort(out)
	return out
}

// WriteError answers err as h answers every error.
func (h *Handler) WriteError(w http.ResponseWriter, r *http.Request, err error) {
	h.writeError(w, r, "", err)
}

// AdminRoute reports whether path is one of h's administrative routes.
func (h *Handler) AdminRoute(path string) bool { return h.routes[path].admin }
