package services_test

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/kovs-net/kovs/test/e2e/framework"
)

// affinityTimeout is the Service's sessionAffinityConfig.clientIP.timeoutSeconds: the API
// accepts 1 to 86400; 10 s keeps the test short while far above probe timings.
const affinityTimeout = 10 * time.Second

// expiryRounds of waiting out the timeout: a fresh pick is the same backend again with
// probability 1/3 per client, so with 3 clients 4 rounds all repeat with probability
// (1/3)^12, about 2e-6, unless affinity does not expire.
const expiryRounds = 4

// testSessionAffinity: with sessionAffinity ClientIP every new connection of a client goes
// to one backend while the client keeps using the Service, and a client idle for longer
// than timeoutSeconds is load-balanced afresh.
func (c *svcCluster) testSessionAffinity(t *testing.T) {
	svc := c.webService(t, "affinity", func(s *corev1.Service) {
		s.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
		s.Spec.SessionAffinityConfig = &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{
			TimeoutSeconds: ptr.To(int32(affinityTimeout / time.Second))}}
	}, svcPort("http", 80, intstr.FromInt32(8080), corev1.ProtocolTCP))
	ip := framework.ClusterIPs(svc)[0]
	var clients []framework.Client
	for _, n := range nodeNames {
		clients = append(clients, c.client(n))
		c.waitAnswered(t, c.client(n), ip, "80/tcp", "ClusterIP with session affinity")
	}
	// stuck checks that n new connections of each client all reach one backend and
	// returns it per client.
	stuck := func(n int, when string) map[string]string {
		t.Helper()
		picks := map[string]string{}
		for _, cl := range clients {
			a := c.s.Spread(cl, ip, "80/tcp", n, probeTimeout)
			ids := a.Identities()
			if len(ids) != 1 || a.Unanswered() > 0 {
				t.Fatalf("%s: %d new connections from %s went to %d backends, want 1 (sessionAffinity ClientIP): %s",
					when, n, cl.Name, len(ids), a)
			}
			picks[cl.Name] = ids[0]
		}
		return picks
	}
	first := stuck(20, "within the affinity timeout")
	t.Logf("affinity picks: %v", first)
	time.Sleep(3 * time.Second)
	for cl, id := range stuck(5, "after 3 s idle (less than timeoutSeconds)") {
		if id != first[cl] {
			t.Errorf("client %s moved from %s to %s after 3 s idle, within timeoutSeconds=%d", cl, first[cl], id, affinityTimeout/time.Second)
		}
	}
	prev := first
	for round := 1; round <= expiryRounds; round++ {
		time.Sleep(affinityTimeout + 3*time.Second)
		picks := stuck(5, "after the affinity timeout passed")
		t.Logf("after %s idle (round %d): %v", affinityTimeout+3*time.Second, round, picks)
		for cl, id := range picks {
			if id != prev[cl] {
				t.Logf("client %s moved from %s to %s once the affinity expired", cl, prev[cl], id)
				return
			}
		}
		prev = picks
	}
	t.Errorf("no client ever moved to another backend after idling longer than timeoutSeconds=%d (%d rounds, 3 clients): "+
		"the affinity does not expire", affinityTimeout/time.Second, expiryRounds)
}
