// Package suite runs the network-policy-api conformance suite
// (sigs.k8s.io/network-policy-api/conformance) as the module's own CI runs it: the
// TestConformanceProfiles of its conformance package, with the same flags
// (--conformance-profiles=ClusterNetworkPolicy --all-features and the implementation's
// details), against the cluster KUBECONFIG names. The one difference is the manifests:
// the suite gets base/ (written by genbase before the build, see go:generate below), the
// module's own conformance/base, and its base manifests without the SCTP servers, which
// this kernel cannot run (package strip). make conformance runs it through
// test/e2e/conformance (TestConformance), which brings up the real-node sandbox.
package suite

import (
	"embed"
	"os"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/config"
	"sigs.k8s.io/yaml"

	api "sigs.k8s.io/network-policy-api/apis/v1beta1"
	"sigs.k8s.io/network-policy-api/conformance/tests"
	"sigs.k8s.io/network-policy-api/conformance/utils/flags"
	"sigs.k8s.io/network-policy-api/conformance/utils/suite"
)

//go:generate go run ../genbase base

// manifests is the suite's manifest file system: what the module's conformance.Manifests
// holds under base/, plus base/manifests-without-sctp.yaml.
//
//go:embed base
var manifests embed.FS

const baseManifests = "base/manifests-without-sctp.yaml"

// TestConformanceProfiles is the module's test of the same name (conformance/
// conformance_profile_test.go) with Options.FS and Options.BaseManifests set.
func TestConformanceProfiles(t *testing.T) {
	cfg, err := config.GetConfig()
	if err != nil {
		t.Fatalf("loading the Kubernetes config: %v", err)
	}
	c, err := client.New(cfg, client.Options{})
	if err != nil {
		t.Fatalf("the controller-runtime client: %v", err)
	}
	clientSet, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatalf("the client-go clientset: %v", err)
	}
	if err := api.Install(c.Scheme()); err != nil {
		t.Fatal(err)
	}
	if err := apiextensionsv1.AddToScheme(c.Scheme()); err != nil {
		t.Fatal(err)
	}
	profiles := suite.ParseConformanceProfiles(*flags.ConformanceProfiles)
	if profiles.Len() == 0 {
		t.Fatal("--conformance-profiles is empty: kovs runs the suite by profile (ClusterNetworkPolicy), as the module's CI does")
	}
	impl, err := suite.ParseImplementation(*flags.ImplementationOrganization, *flags.ImplementationProject,
		*flags.ImplementationURL, *flags.ImplementationVersion, *flags.ImplementationContact,
		*flags.ImplementationAdditionalInformation)
	if err != nil {
		t.Fatalf("the implementation's details: %v", err)
	}
	fsys := manifests
	cSuite, err := suite.NewConformanceProfileTestSuite(suite.ConformanceProfileOptions{
		Options: suite.Options{
			Client:                     c,
			ClientSet:                  clientSet,
			KubeConfig:                 *cfg,
			Debug:                      *flags.ShowDebug,
			CleanupBaseResources:       *flags.CleanupBaseResources,
			SupportedFeatures:          suite.ParseSupportedFeatures(*flags.SupportedFeatures),
			ExemptFeatures:             suite.ParseSupportedFeatures(*flags.ExemptFeatures),
			EnableAllSupportedFeatures: *flags.EnableAllSupportedFeatures,
			FS:                         &fsys,
			BaseManifests:              baseManifests,
		},
		Implementation:      *impl,
		ConformanceProfiles: profiles,
	})
	if err != nil {
		t.Fatalf("the conformance profile suite: %v", err)
	}
	cSuite.Setup(t)
	cSuite.Run(t, tests.ConformanceTests)
	report, err := cSuite.Report()
	if err != nil {
		t.Fatalf("the conformance profile report: %v", err)
	}
	raw, err := yaml.Marshal(report)
	if err != nil {
		t.Fatal(err)
	}
	if out := *flags.ReportOutput; out != "" {
		if err := os.WriteFile(out, raw, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("Conformance report:\n%s", raw)
}
