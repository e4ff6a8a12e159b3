// Package deploy holds dflash's container build (Dockerfile) and a Kubernetes example (k8s/):
// files, not code. Its test parses the manifests and checks that every endpoint, port, flag and
// metric they name exists on a running server, so the example cannot drift from the binary. It
// must never hold code the binary uses.
package deploy
