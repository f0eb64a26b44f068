// Command kovs-controller is kovs's central controller: node subnets, pod addresses, and
// NetworkPolicy compiled per node and streamed to the agents.
package main

import (
	"context"
	"flag"
	"fmt"
	"maps"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	log "github.com/sirupsen/logrus"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	authnclient "k8s.io/client-go/kubernetes/typed/authentication/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	policyapi "sigs.k8s.io/network-policy-api/pkg/client/clientset/versioned"

	"github.com/kovs-net/kovs/go-controller/pkg/controller"
	"github.com/kovs-net/kovs/go-controller/pkg/controller/addresses"
	"github.com/kovs-net/kovs/go-controller/pkg/controller/ipam"
	"github.com/kovs-net/kovs/go-controller/pkg/controller/metrics"
	"github.com/kovs-net/kovs/go-controller/pkg/controller/receipts"
	"github.com/kovs-net/kovs/go-controller/pkg/controller/transition"
	"github.com/kovs-net/kovs/go-controller/pkg/policy/stream"
)

func main() {
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig (empty: in-cluster)")
	cidrs := flag.String("cluster-cidrs", "10.244.0.0/16,fd00:10:244::/48", "pod cluster CIDRs, at most one per family")
	v4Block := flag.Int("ipv4-block-size", 24, "prefix length of each node's IPv4 block")
	v6Block := flag.Int("ipv6-block-size", 64, "prefix length of each node's IPv6 block")
	useNodeCIDRs := flag.Bool("use-node-pod-cidrs", false, "take node blocks from Node.spec.podCIDRs (kube-controller-manager --allocate-node-cidrs)")
	leaderElect := flag.Bool("leader-elect", true, "run leader election so several replicas can run safely")
	leaseNS := flag.String("lease-namespace", "kube-system", "namespace of the leader election Lease")
	workers := flag.Int("workers", 16, "pod address workers (each waits on its pod's patch round trip)")
	apiQPS := flag.Float64("kube-api-qps", 300, "requests per second to kube-apiserver (address allocation, realization annotations, leader election; TokenReviews have their own)")
	apiBurst := flag.Int("kube-api-burst", 600, "burst of --kube-api-qps")
	policyListen := flag.String("policy-listen", fmt.Sprintf(":%d", stream.DefaultPort), "where agents stream their NetworkPolicy from (HTTPS); empty: no stream")
	policyMinSync := flag.Duration("policy-min-sync-interval", 0, "least time between two NetworkPolicy compile batches")
	clusterMinSync := flag.Duration("cluster-policy-min-sync-interval", -1, "least time between two ClusterNetworkPolicy compile batches (a new pod opens only after the next one); negative: --policy-min-sync-interval")
	transitionTimeout := flag.Duration("policy-transition-timeout", transition.DefaultTimeout, "how long NetworkPolicy relaxations wait for every node to realize the restrictions before them; a node that takes longer is held (no relaxation until it reports) and the others go on")
	agentSA := flag.String("agent-service-account", "kube-system/kovs-agent", "namespace/name of the agents' ServiceAccount: only its node-bound tokens may stream")
	tlsSANs := flag.String("policy-tls-sans", "", "extra DNS names and IP addresses for the stream's serving certificate (comma-separated)")
	metricsListen := flag.String("metrics-listen", "127.0.0.1:9091", "where /metrics, /healthz and /readyz are served; beyond loopback, /metrics only answers other hosts (unauthenticated: an opt-in); empty: not served")
	reviewQPS := flag.Float64("token-review-qps", 20, "TokenReviews per second (the agents' authentication) on a client of their own, apart from address allocation and leader election")
	reviewBurst := flag.Int("token-review-burst", 40, "burst of --token-review-qps")
	tokenVerification := flag.String("agent-token-verification", "local", "how the agents' tokens are authenticated: local (the controller verifies their signature with kube-apiserver's published issuer keys and their binding with its informers; a TokenReview only for what it cannot decide) or review (a TokenReview for every token)")
	reviewsInFlight := flag.Int("token-review-max-in-flight", stream.DefaultReviewsInFlight, "TokenReviews waiting on kube-apiserver at once (a connecting agent finds no free one within 2 s: 503, it retries)")
	leaseDuration := flag.Duration("leader-elect-lease-duration", controller.DefaultLeaseDuration, "how long a leader's Lease holds without renewal before another replica takes over")
	renewDeadline := flag.Duration("leader-elect-renew-deadline", controller.DefaultRenewDeadline, "how long the leader tries to renew its Lease before it stops leading (and exits); below --leader-elect-lease-duration")
	retryPeriod := flag.Duration("leader-elect-retry-period", controller.DefaultRetryPeriod, "wait between two attempts to take or renew the Lease")
	debugReceipts := flag.Int("debug-receipts", 0, "keep when the NetworkPolicy and Pod informers received each of the last N object versions of each kind (kind, namespace/name, resourceVersion, time), and when each generation of a node's share was written to its policy stream, and serve them as JSON at "+receipts.Path+" on --metrics-listen, loopback only (the scale harness's clock of kovs's own time); 0: off")
	debugPprof := flag.Bool("debug-pprof", false, "serve Go's CPU, heap and goroutine profiles (net/http/pprof) at /debug/pprof/ on --metrics-listen, loopback only; a CPU profile or trace may last at most 29 s (the listener's write timeout)")
	logLevel := flag.String("log-level", "info", "debug, info, warn or error")
	flag.Parse()
	if *clusterMinSync < 0 {
		*clusterMinSync = *policyMinSync
	}

	level, err := log.ParseLevel(*logLevel)
	if err != nil {
		fatal(err)
	}
	log.SetLevel(level)
	plan, err := clusterCIDRs(*cidrs, *v4Block, *v6Block)
	if err != nil {
		fatal(err)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		fatal(err)
	}
	if *apiQPS <= 0 || *apiBurst < 1 {
		fatal(fmt.Errorf("--kube-api-qps %v and --kube-api-burst %d: both must be positive", *apiQPS, *apiBurst))
	}
	if *transitionTimeout <= 0 {
		fatal(fmt.Errorf("--policy-transition-timeout %s: use a positive duration, such as 10s", *transitionTimeout))
	}
	if *reviewsInFlight < 1 {
		fatal(fmt.Errorf("--token-review-max-in-flight %d: use at least 1", *reviewsInFlight))
	}
	if *workers < 1 {
		fatal(fmt.Errorf("--workers %d: use at least 1", *workers))
	}
	if *tokenVerification != "local" && *tokenVerification != "review" {
		fatal(fmt.Errorf("--agent-token-verification %q: use local or review", *tokenVerification))
	}
	if *debugReceipts < 0 {
		fatal(fmt.Errorf("--debug-receipts %d: use 0 (off) or a positive count", *debugReceipts))
	}
	cfg.QPS, cfg.Burst = float32(*apiQPS), *apiBurst
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		fatal(err)
	}
	reviewCfg := rest.CopyConfig(cfg)
	reviewCfg.QPS, reviewCfg.Burst = float32(*reviewQPS), *reviewBurst
	reviews, err := authnclient.NewForConfig(reviewCfg)
	if err != nil {
		fatal(err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		fatal(err)
	}
	policyAPI, err := policyapi.NewForConfig(cfg)
	if err != nil {
		fatal(err)
	}
	agentNS, agentName, ok := strings.Cut(*agentSA, "/")
	if !ok || agentNS == "" || agentName == "" {
		fatal(fmt.Errorf("--agent-service-account %q: use namespace/name", *agentSA))
	}
	names, ips := splitSANs(*tlsSANs)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	var ring *receipts.Ring
	if *debugReceipts > 0 && *metricsListen != "" {
		ring = receipts.NewRing(*debugReceipts)
	}
	set, health, err := serveMetrics(ctx, *metricsListen, ring, *debugPprof)
	if err != nil {
		fatal(err)
	}
	err = controller.Run(ctx, controller.Config{
		Addresses:   addresses.Config{ClusterCIDRs: plan, UseNodePodCIDRs: *useNodeCIDRs},
		LeaderElect: *leaderElect, LeaseNamespace: *leaseNS, LeaseName: "kovs-controller", Workers: *workers,
		LeaseDuration: *leaseDuration, RenewDeadline: *renewDeadline, RetryPeriod: *retryPeriod,
		Pod: controller.OwnPod{Namespace: os.Getenv("POD_NAMESPACE"), Name: os.Getenv("POD_NAME")},
		Policy: controller.PolicyConfig{Listen: *policyListen, MinSyncInterval: *policyMinSync, ClusterMinSyncInterval: *clusterMinSync,
			AgentNamespace: agentNS, AgentServiceAccount: agentName, TLS: controller.DefaultPolicyTLS(names, ips),
			TokenReviews: reviews.TokenReviews(), TokenReviewsInFlight: *reviewsInFlight, ReviewEveryToken: *tokenVerification == "review",
			TransitionTimeout: *transitionTimeout},
		Metrics: set, Health: health, Dynamic: dyn, PolicyAPI: policyAPI, Receipts: ring,
	}, client)
	if err != nil {
		fatal(err)
	}
}

// serveMetrics registers the controller's metrics on a registry of its own and serves
// them with /healthz and /readyz on addr (nothing when addr is empty), ring's receipts if
// it is set, and Go's profiles if profiles is.
func serveMetrics(ctx context.Context, addr string, ring *receipts.Ring, profiles bool) (*metrics.Set, *metrics.Health, error) {
	if addr == "" {
		return nil, nil, nil
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	set, err := metrics.NewSet(reg)
	if err != nil {
		return nil, nil, err
	}
	health := metrics.NewHealth()
	debug := map[string]http.Handler{}
	if ring != nil {
		debug[receipts.Path] = ring
	}
	if profiles {
		maps.Copy(debug, profileHandlers())
	}
	go func() {
		if err := metrics.Serve(ctx, addr, reg, health, debug); err != nil {
			fatal(err)
		}
	}()
	return set, health, nil
}

// profileHandlers are net/http/pprof's handlers at their usual paths: /debug/pprof/
// lists the profiles and serves each by name (heap, goroutine, allocs...).
func profileHandlers() map[string]http.Handler {
	return map[string]http.Handler{
		"/debug/pprof/":        http.HandlerFunc(pprof.Index),
		"/debug/pprof/cmdline": http.HandlerFunc(pprof.Cmdline),
		"/debug/pprof/profile": http.HandlerFunc(pprof.Profile),
		"/debug/pprof/symbol":  http.HandlerFunc(pprof.Symbol),
		"/debug/pprof/trace":   http.HandlerFunc(pprof.Trace),
	}
}

func clusterCIDRs(list string, v4Block, v6Block int) ([]ipam.ClusterCIDR, error) {
	var plan []ipam.ClusterCIDR
	for _, c := range strings.Split(list, ",") {
		c = strings.TrimSpace(c)
		if c == "" {
			continue
		}
		block := v4Block
		if strings.Contains(c, ":") {
			block = v6Block
		}
		cc, err := ipam.ParseClusterCIDR(c, block)
		if err != nil {
			return nil, fmt.Errorf("--cluster-cidrs: %w", err)
		}
		plan = append(plan, cc)
	}
	return plan, nil
}

// splitSANs sorts a comma-separated list into DNS names and IP addresses.
func splitSANs(list string) (names []string, ips []net.IP) {
	for _, s := range strings.Split(list, ",") {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		if ip := net.ParseIP(s); ip != nil {
			ips = append(ips, ip)
		} else {
			names = append(names, s)
		}
	}
	return names, ips
}

func fatal(err error) {
	log.WithError(err).Fatal("kovs-controller")
}
