package controller

import (
	"context"
	"fmt"
	"net"
	"time"

	log "github.com/sirupsen/logrus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	authnclient "k8s.io/client-go/kubernetes/typed/authentication/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	"github.com/kovs-net/kovs/go-controller/pkg/controller/networkpolicy"
	"github.com/kovs-net/kovs/go-controller/pkg/controller/realization"
	"github.com/kovs-net/kovs/go-controller/pkg/controller/servingcert"
	"github.com/kovs-net/kovs/go-controller/pkg/controller/transition"
	"github.com/kovs-net/kovs/go-controller/pkg/policy/stream"
)

// PolicyConfig configures NetworkPolicy: the compiler, the stream to the agents and its
// credentials.
type PolicyConfig struct {
	// Listen is the stream server's address (host:port); empty: no server (the compiler
	// and the realization status still run).
	Listen string
	// MinSyncInterval is the compiler's least time between two batches.
	MinSyncInterval time.Duration
	// ClusterMinSyncInterval is the ClusterNetworkPolicy feed's least time between two
	// batches (each compiles every policy against every pod). A new pod's node lists it,
	// and its agent opens it, only after the feed's next batch.
	ClusterMinSyncInterval time.Duration
	// Sent, if set, is told of every generation written to a node's stream
	// (--debug-receipts).
	Sent func(node string, generation uint64)
	// AgentNamespace and AgentServiceAccount name the agents' ServiceAccount: only its
	// node-bound tokens are let in (defaults kube-system, kovs-agent).
	AgentNamespace, AgentServiceAccount string
	// TLS is where the serving certificate and its CA live, and the names it is valid
	// for (see DefaultPolicyTLS).
	TLS servingcert.Config
	// KeepaliveInterval of the streams (default 15 s).
	KeepaliveInterval time.Duration
	// TokenReviews authenticates the agents: a client of its own (its own rate limits),
	// so that whoever reaches the stream's port cannot use up the controller's client,
	// which allocates addresses and renews the Lease. Nil: the controller's client.
	TokenReviews authnclient.TokenReviewInterface
	// TokenReviewsInFlight bounds the TokenReviews that run at once (default
	// stream.DefaultReviewsInFlight).
	TokenReviewsInFlight int
	// ReviewEveryToken asks kube-apiserver for a TokenReview of every agent token
	// (--agent-token-verification=review). By default the controller verifies the
	// agents' bound tokens itself (stream.BoundTokenVerifier) and asks only about the
	// tokens it cannot decide.
	ReviewEveryToken bool
	// TransitionTimeout is how long relaxations wait for the nodes to realize the
	// restrictions before them (default transition.DefaultTimeout).
	TransitionTimeout time.Duration
}

// DefaultPolicyTLS is the certificate configuration kovs ships with: the Secret
// kube-system/kovs-controller-tls, the CA in the ConfigMap kube-system/kovs-ca, valid for
// the Service kube-system/kovs-controller (stream.DefaultServerName), localhost and the
// loopback addresses, plus extra names and addresses.
func DefaultPolicyTLS(extraNames []string, extraIPs []net.IP) servingcert.Config {
	names := append(servingcert.ServiceDNSNames("kube-system", "kovs-controller"), "localhost")
	return servingcert.Config{Namespace: "kube-system", SecretName: "kovs-controller-tls", ConfigMap: "kovs-ca",
		DNSNames:    append(names, extraNames...),
		IPAddresses: append([]net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}, extraIPs...)}
}

func (c *PolicyConfig) defaults() {
	if c.AgentNamespace == "" {
		c.AgentNamespace = "kube-system"
	}
	if c.AgentServiceAccount == "" {
		c.AgentServiceAccount = "kovs-agent"
	}
	if c.TLS.SecretName == "" {
		c.TLS = DefaultPolicyTLS(nil, nil)
	}
}

// policyControllers are the NetworkPolicy parts of the controller.
type policyControllers struct {
	cfg         PolicyConfig
	compiler    *networkpolicy.Compiler
	realization *realization.Controller
	gate        *transition.Gate
	obs         observer
	pods        corelisters.PodLister
	nodes       corelisters.NodeLister
}

// bothReports hands every realization report to the transition gate and the realization
// status.
type bothReports [2]stream.Reports

func (b bothReports) Realized(node string, generation uint64) {
	for _, r := range b {
		r.Realized(node, generation)
	}
}

// newPolicyControllers builds the compiler and the realization status on the factory's
// informers (before it starts).
func newPolicyControllers(factory informers.SharedInformerFactory, client kubernetes.Interface, recorder record.EventRecorder,
	cfg PolicyConfig, obs observer) (*policyControllers, error) {
	cfg.defaults()
	comp, err := networkpolicy.New(factory, networkpolicy.Options{MinSyncInterval: cfg.MinSyncInterval, Observe: obs.policyBatch()})
	if err != nil {
		return nil, err
	}
	status, err := realization.New(factory, client, recorder, realization.Options{Metrics: obs.reconcile()})
	if err != nil {
		return nil, err
	}
	return &policyControllers{cfg: cfg, compiler: comp, realization: status, obs: obs,
		pods: factory.Core().V1().Pods().Lister(), nodes: factory.Core().V1().Nodes().Lister()}, nil
}

// run compiles, follows realization and serves the stream until ctx ends. Every share
// goes through the transition gate, which orders restrictions before relaxations across
// nodes. Generations are rebased on the time this replica started leading, so that agents
// see them grow across restarts and leader changes (as stream.Rebase does).
func (p *policyControllers) run(ctx context.Context, client kubernetes.Interface, nodes cache.SharedIndexInformer) error {
	p.gate = transition.New(p.compiler, p.obs.transitions(transition.Options{Base: uint64(time.Now().UnixMicro()), Timeout: p.cfg.TransitionTimeout}))
	src := stream.Source(p.gate)
	ctx, cancel := context.WithCancel(ctx)
	parts := map[string]func(context.Context) error{
		"compiler":        p.compiler.Run,
		"transition gate": p.gate.Run,
		"realization":     func(ctx context.Context) error { return p.realization.Run(ctx, src, nodes) },
	}
	defer p.obs.realization(p.realization)()
	if p.cfg.Listen != "" {
		parts["stream server"] = func(ctx context.Context) error { return p.serve(ctx, client, src) }
	} else {
		log.Warn("no --policy-listen: agents get no NetworkPolicy from this controller")
	}
	return runAll(ctx, cancel, parts)
}

// serve runs the policy stream server.
func (p *policyControllers) serve(ctx context.Context, client kubernetes.Interface, src stream.Source) error {
	cert, err := servingcert.Start(ctx, client, p.cfg.TLS, 12*time.Hour)
	if err != nil {
		return fmt.Errorf("policy stream certificate: %w", err)
	}
	ln, err := net.Listen("tcp", p.cfg.Listen)
	if err != nil {
		return fmt.Errorf("policy stream: %w", err)
	}
	src, reports := p.obs.stream(src, bothReports{p.gate, p.realization.Reports()})
	reviews := p.cfg.TokenReviews
	if reviews == nil {
		reviews = client.AuthenticationV1().TokenReviews()
	}
	reviewer := stream.NewTokenReviewer(reviews)
	reviewer.MaxInFlight = p.cfg.TokenReviewsInFlight
	var auth stream.Authenticator = reviewer
	if !p.cfg.ReviewEveryToken {
		auth = p.boundTokenVerifier(ctx, client, reviewer)
	}
	server := stream.NewServer(stream.ServerConfig{
		Source:            src,
		Authenticator:     auth,
		Authorizer:        stream.AgentAuthorizer{User: stream.ServiceAccountUser(p.cfg.AgentNamespace, p.cfg.AgentServiceAccount)},
		Reports:           reports,
		KeepaliveInterval: p.cfg.KeepaliveInterval,
		Sent:              p.cfg.Sent,
	})
	log.WithField("address", ln.Addr().String()).WithField("agents", p.cfg.AgentNamespace+"/"+p.cfg.AgentServiceAccount).
		Info("serving NetworkPolicy to the agents")
	return server.Serve(ctx, ln, cert.TLSConfig())
}

// boundTokenVerifier verifies the agents' tokens with the issuer's keys and the
// informers' Pods and Nodes, and a ServiceAccount informer of its own that watches the
// agents' ServiceAccount alone. It reads the keys and waits for that informer (at most
// verifierWarmup) before the stream listens, so that the agents connecting to a new
// leader find it ready; what is not ready by then goes to reviewer until it is.
func (p *policyControllers) boundTokenVerifier(ctx context.Context, client kubernetes.Interface, reviewer *stream.TokenReviewer) *stream.BoundTokenVerifier {
	accounts := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithNamespace(p.cfg.AgentNamespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", p.cfg.AgentServiceAccount).String()
		}))
	informer := accounts.Core().V1().ServiceAccounts()
	objects := informerObjects{pods: p.pods, nodes: p.nodes, accounts: informer.Lister()}
	accounts.Start(ctx.Done())
	keys := &stream.IssuerKeys{Get: apiserverGet(client)}
	warm, cancel := context.WithTimeout(ctx, verifierWarmup)
	defer cancel()
	if err := keys.Read(warm); err != nil {
		log.WithError(err).Warn("agent tokens: the issuer's keys could not be read; tokens go to TokenReviews until they are")
	}
	if !cache.WaitForCacheSync(warm.Done(), informer.Informer().HasSynced) {
		log.WithField("serviceaccount", p.cfg.AgentNamespace+"/"+p.cfg.AgentServiceAccount).
			Warn("agent tokens: the agents' ServiceAccount is not read yet; tokens go to TokenReviews until it is")
	}
	return &stream.BoundTokenVerifier{
		Keys:      keys,
		Objects:   objects,
		Fallback:  reviewer,
		Audiences: reviewer.Audiences,
		Decided:   p.obs.authentication(),
	}
}

// verifierWarmup bounds how long the stream waits for the token verifier's reads.
const verifierWarmup = 10 * time.Second

// apiserverGet reads a path of kube-apiserver (the issuer discovery) with client.
func apiserverGet(client kubernetes.Interface) func(context.Context, string) ([]byte, error) {
	return func(ctx context.Context, path string) ([]byte, error) {
		rc := client.Discovery().RESTClient()
		if rc == nil {
			return nil, fmt.Errorf("no REST client to read %s", path)
		}
		return rc.Get().AbsPath(path).DoRaw(ctx)
	}
}

// informerObjects answers stream.BoundObjects from the listers.
type informerObjects struct {
	pods     corelisters.PodLister
	nodes    corelisters.NodeLister
	accounts corelisters.ServiceAccountLister
}

func (o informerObjects) ServiceAccount(namespace, name string) *stream.BoundObject {
	sa, err := o.accounts.ServiceAccounts(namespace).Get(name)
	if err != nil {
		return nil
	}
	return boundObject(sa.ObjectMeta)
}

func (o informerObjects) Node(name string) *stream.BoundObject {
	n, err := o.nodes.Get(name)
	if err != nil {
		return nil
	}
	return boundObject(n.ObjectMeta)
}

func (o informerObjects) Pod(namespace, name string) *stream.BoundObject {
	pod, err := o.pods.Pods(namespace).Get(name)
	if err != nil {
		return nil
	}
	b := boundObject(pod.ObjectMeta)
	b.Node, b.ServiceAccount = pod.Spec.NodeName, pod.Spec.ServiceAccountName
	return b
}

func boundObject(m metav1.ObjectMeta) *stream.BoundObject {
	b := &stream.BoundObject{UID: string(m.UID)}
	if m.DeletionTimestamp != nil {
		b.Deleted = m.DeletionTimestamp.Time
	}
	return b
}
