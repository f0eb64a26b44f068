package main

import (
	"context"
	"errors"
	"flag"
	"os"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/kovs-net/kovs/go-controller/pkg/kovsctl"
)

// plan checks an address plan given by flags, or the live cluster's without them.
func plan(kubeconfig string, args []string) error {
	fs := flag.NewFlagSet("plan", flag.ExitOnError)
	cluster := fs.String("cluster-cidr", "", "cluster CIDRs, at most one per family (empty: read the live cluster)")
	blocks := fs.String("block-size", "", "node block prefix length per cluster CIDR, in the same order (default /24 IPv4, /64 IPv6)")
	services := fs.String("service-cidr", "", "Service CIDRs (comma-separated)")
	nodes := fs.String("node-cidr", "", "the nodes' networks (comma-separated)")
	maxPods := fs.Int("max-pods", 0, "kubelet's maxPods (0: unknown)")
	_ = fs.Parse(args)
	var req kovsctl.PlanRequest
	var err error
	if *cluster != "" {
		req, err = kovsctl.ParsePlan(*cluster, *blocks, *services, *nodes, *maxPods)
	} else {
		req, err = livePlan(kubeconfig)
	}
	if err != nil {
		return err
	}
	rep := kovsctl.Plan(req)
	rep.Print(os.Stdout)
	if !rep.OK() {
		return errors.New("the address plan has problems (above)")
	}
	return nil
}

func livePlan(kubeconfig string) (kovsctl.PlanRequest, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = kubeconfig
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return kovsctl.PlanRequest{}, err
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return kovsctl.PlanRequest{}, err
	}
	return kovsctl.Access{Client: client}.LivePlan(context.Background())
}
