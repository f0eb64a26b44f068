// Package policyapi holds the manifests the network-policy-api conformance suite
// (sigs.k8s.io/network-policy-api/conformance, profile ClusterNetworkPolicy) runs with
// on kovs: the module's conformance/base directory, copied verbatim, and
// base/manifests-without-sctp.yaml, the suite's base manifests without the containers
// that serve SCTP. Every pod of the suite's base manifests runs `agnhost porter` on SCTP
// ports in two of its containers, and porter exits when it cannot listen on SCTP, so on
// a kernel without SCTP sockets every test would fail at setup; without those
// containers the pods start and only the SCTP tests (named, with the evidence, in
// docs/conformance.md) cannot run.
//
// The files are generated from the module at the version go.mod names, never edited:
//
//	go test ./test/e2e/conformance/policyapi/ -run TestManifestsFromModule -update
//
// and the same test fails when they drift from it. The suite reads manifests from an
// embed.FS only, which is why they are files here and not generated when the suite runs.
package policyapi

import "embed"

// Manifests is the suite's manifest file system: pass it as Options.FS.
//
//go:embed base
var Manifests embed.FS

// BaseManifests is the path in Manifests of the base manifests without SCTP: pass it as
// Options.BaseManifests.
const BaseManifests = "base/manifests-without-sctp.yaml"
