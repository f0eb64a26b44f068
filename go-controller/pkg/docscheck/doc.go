// Package docscheck holds no code: its tests check that docs/configuration.md documents
// every command-line flag of kovs-controller, kovs-agent, kovsctl, kovs-ovs and
// kovs-images (read from their sources), every key of kovs-cni's network config, and
// every key of the ConfigMap in dist/, so a new flag or key cannot ship undocumented. Run with
// `go test ./go-controller/pkg/docscheck/` (part of `make unit`).
package docscheck
