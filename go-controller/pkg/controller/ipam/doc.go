// Package ipam is the address management of kovs-controller: it carves per-node
// blocks out of the cluster CIDRs and hands out pod addresses from a node's
// blocks. It is pure logic over net/netip: the reconcilers that read and write
// the Node and Pod annotations live elsewhere and call into it.
//
// # Pieces
//
//   - [ClusterCIDR] is one configured cluster CIDR and its node block size.
//   - [SubnetAllocator] hands out the node blocks of one cluster CIDR;
//     [NodeSubnets] holds one per family and allocates a node's blocks for all
//     families at once.
//   - [AddressPool] hands out the pod addresses of one node block;
//     [PodAddressPools] holds one per family of a node and allocates a pod's
//     addresses for all families at once.
//   - [PodNetwork] and [NodeSubnetsAnnotation] are the values recorded in the
//     kovs.io/pod-network and kovs.io/node-subnets annotations.
//
// Every allocator is safe for concurrent use.
//
// # Allocation order
//
// Blocks and addresses are handed out "back of the line": first those never
// handed out (in ascending order, through a cursor, so a /64 is never
// materialized), then those freed longest ago. A freed address is never reused
// while a never-used one remains and, with a quarantine, not before the
// quarantine has elapsed, even if that leaves the pool empty. The exact order
// among freed addresses is their release order while the never-used range is
// small (below about a million addresses, so every IPv4 block of /12 or longer);
// in larger ranges (IPv6 /64s) freed addresses are not queued individually, so
// that memory stays proportional to the live pods, and they come back in
// ascending order once the never-used range is exhausted.
//
// # Order after a restart
//
// The controller rebuilds its state from the API with Restore calls and cannot
// know which addresses were freed before the restart, nor when. Restore
// therefore moves the never-used cursor past the highest restored address:
// every address below it that is not live is treated as freed at the time of
// the restore. Those are reused in ascending order, only after the addresses
// above the highest live one are exhausted, and (with a quarantine) not before
// the quarantine has elapsed since the restore. What a rebuild cannot see is an
// address above the highest live one that was freed just before the restart:
// it looks never-used and can be handed out at once. A caller that records the
// cursor (see AddressPool.HighWater) can close that gap with RestoreHighWater.
// The result of a rebuild depends only on the restored set, never on the order
// of the Restore calls, except for which of two conflicting claims wins: the
// first one restored.
package ipam
