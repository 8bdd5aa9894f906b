// Package deploy holds what rolls ccload out to a fleet, and the tests
// that check it: the Kubernetes manifests (kubernetes/: a DaemonSet that
// runs `ccload daemon` on every node, its ConfigMap and a kustomization),
// the container image (Containerfile, built by build-image.sh) and its
// README. The package has no code of its own; its tests decode the
// manifests strictly into the Kubernetes API types and check them against
// the daemon, offline, and run the image the way the DaemonSet does.
package deploy
