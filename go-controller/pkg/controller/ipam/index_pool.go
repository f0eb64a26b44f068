package ipam

import "time"

// defaultSpillAbove is how many never-used indices must remain for a released
// index to become a gap instead of joining the FIFO (see indexPool.release).
const defaultSpillAbove = 1 << 20

// indexPool hands out the indices first .. first+size-1 to owners, back of the
// line: never-used indices first, then gaps (indices below the cursor whose
// history is unknown or not kept, ascending), then the FIFO of freed indices,
// oldest first. It is the shared engine of SubnetAllocator and AddressPool,
// which map indices to blocks and addresses and hold the lock.
//
// Every index is in exactly one state:
//   - live: in ownerOf;
//   - queued: in queued, with a FIFO entry of the same sequence number;
//   - gap: first+gapScan <= index < first+handed, neither live nor queued;
//   - never used: index >= first+handed.
//
// Memory is proportional to the live owners plus the FIFO, never to size.
type indexPool struct {
	first uint64
	size  uint64 // number of indices, at least 1; first+size-1 fits a uint64

	handed      uint64    // never-used cursor: first+handed is the next never-used index
	gapScan     uint64    // gap cursor: indices below first+gapScan are live or queued
	gapsReadyAt time.Time // no gap is handed out before this (quarantine)

	indexOf map[string]uint64
	ownerOf map[uint64]string
	queued  map[uint64]uint64 // index -> sequence number of its FIFO entry
	fifo    []freedIndex      // freed indices in release order, from fifo[head]
	head    int
	seq     uint64

	quarantine time.Duration
	spillAbove uint64
}

// freedIndex is a FIFO entry. It is stale, and skipped, when queued no longer
// maps its index to its sequence number (the index was restored meanwhile).
type freedIndex struct {
	index, seq uint64
	readyAt    time.Time
}

// indexConflict is why restore refused an index: the holder of the index
// (ConflictTaken) or the owner's current index (ConflictAlreadyAssigned).
type indexConflict struct {
	reason ConflictReason
	holder string
	held   uint64
}

// waitInfo describes an exhausted pool.
type waitInfo struct {
	inUse, waiting uint64
	readyAt        time.Time
}

func newIndexPool(first, size uint64, quarantine time.Duration) indexPool {
	return indexPool{
		first:      first,
		size:       size,
		indexOf:    map[string]uint64{},
		ownerOf:    map[uint64]string{},
		queued:     map[uint64]uint64{},
		quarantine: quarantine,
		spillAbove: defaultSpillAbove,
	}
}

func (p *indexPool) lookup(owner string) (uint64, bool) {
	i, ok := p.indexOf[owner]
	return i, ok
}

func (p *indexPool) inUse() uint64 { return uint64(len(p.ownerOf)) }

// take returns the owner's index, handing out the next free one if it has
// none. fresh says whether it was handed out by this call.
func (p *indexPool) take(owner string, now time.Time) (index uint64, fresh, ok bool) {
	if i, found := p.indexOf[owner]; found {
		return i, false, true
	}
	i, found := p.nextFree(now)
	if !found {
		return 0, false, false
	}
	p.assign(owner, i)
	return i, true, true
}

func (p *indexPool) nextFree(now time.Time) (uint64, bool) {
	if p.handed < p.size {
		i := p.first + p.handed
		p.handed++
		return i, true
	}
	if !now.Before(p.gapsReadyAt) {
		if i, ok := p.nextGap(); ok {
			p.gapScan++
			return i, true
		}
	}
	p.dropStaleHead()
	if p.head < len(p.fifo) && !now.Before(p.fifo[p.head].readyAt) {
		i := p.fifo[p.head].index
		delete(p.queued, i)
		p.popHead()
		return i, true
	}
	return 0, false
}

// nextGap advances the gap cursor to the next gap, without taking it.
func (p *indexPool) nextGap() (uint64, bool) {
	for ; p.gapScan < p.handed; p.gapScan++ {
		i := p.first + p.gapScan
		_, live := p.ownerOf[i]
		_, queued := p.queued[i]
		if !live && !queued {
			return i, true
		}
	}
	return 0, false
}

func (p *indexPool) dropStaleHead() {
	for p.head < len(p.fifo) {
		f := p.fifo[p.head]
		if seq, ok := p.queued[f.index]; ok && seq == f.seq {
			return
		}
		p.popHead()
	}
}

func (p *indexPool) popHead() {
	p.fifo[p.head] = freedIndex{}
	p.head++
	switch {
	case p.head == len(p.fifo):
		p.fifo, p.head = p.fifo[:0], 0
	case p.head >= 1024 && 2*p.head >= len(p.fifo):
		n := copy(p.fifo, p.fifo[p.head:])
		p.fifo, p.head = p.fifo[:n], 0
	}
}

func (p *indexPool) assign(owner string, i uint64) {
	p.indexOf[owner] = i
	p.ownerOf[i] = owner
}

// release frees the owner's index. While more than spillAbove never-used
// indices remain, the index becomes a gap rather than a FIFO entry: it cannot
// come back before those are all handed out, and keeping it out of the FIFO
// keeps memory bounded in huge ranges. Gaps are all released before any FIFO
// entry (the never-used range only shrinks), so the FIFO stays oldest-first.
func (p *indexPool) release(owner string, now time.Time) (uint64, bool) {
	i, ok := p.indexOf[owner]
	if !ok {
		return 0, false
	}
	delete(p.indexOf, owner)
	delete(p.ownerOf, i)
	if p.size-p.handed > p.spillAbove {
		p.holdGaps(now)
		return i, true
	}
	p.seq++
	p.queued[i] = p.seq
	p.fifo = append(p.fifo, freedIndex{index: i, seq: p.seq, readyAt: now.Add(p.quarantine)})
	return i, true
}

// holdGaps keeps every gap for a quarantine from now: a gap's history is not
// kept, so the newest one sets the time for all.
func (p *indexPool) holdGaps(now time.Time) {
	if ready := now.Add(p.quarantine); ready.After(p.gapsReadyAt) {
		p.gapsReadyAt = ready
	}
}

// restore records that owner holds index i, as read back after a restart.
func (p *indexPool) restore(owner string, i uint64, now time.Time) *indexConflict {
	if cur, ok := p.indexOf[owner]; ok {
		if cur == i {
			return nil
		}
		return &indexConflict{reason: ConflictAlreadyAssigned, held: cur}
	}
	if holder, ok := p.ownerOf[i]; ok {
		return &indexConflict{reason: ConflictTaken, holder: holder}
	}
	delete(p.queued, i) // its FIFO entry, if any, goes stale
	p.skipTo(i, now)
	p.assign(owner, i)
	return nil
}

// skipTo moves the never-used cursor just past index i, unless it is there
// already; the indices it skips become gaps, treated as freed now.
func (p *indexPool) skipTo(i uint64, now time.Time) {
	next := p.first + p.handed
	if i < next {
		return
	}
	if i > next {
		p.holdGaps(now)
	}
	p.handed = i - p.first + 1
}

// restoreHighWater treats every index up to i as handed out before: those not
// live become gaps, treated as freed now.
func (p *indexPool) restoreHighWater(i uint64, now time.Time) {
	if i < p.first+p.handed {
		return
	}
	p.holdGaps(now)
	p.handed = i - p.first + 1
}

// highWater returns the highest index ever handed out, if any.
func (p *indexPool) highWater() (uint64, bool) {
	if p.handed == 0 {
		return 0, false
	}
	return p.first + p.handed - 1, true
}

// wait describes the pool when take fails: every index is live or waiting out
// a quarantine, and readyAt is when the first one becomes free.
func (p *indexPool) wait() waitInfo {
	w := waitInfo{inUse: p.inUse(), waiting: p.size - p.inUse()}
	if _, ok := p.nextGap(); ok {
		w.readyAt = p.gapsReadyAt
	}
	p.dropStaleHead()
	if p.head < len(p.fifo) {
		if r := p.fifo[p.head].readyAt; w.readyAt.IsZero() || r.Before(w.readyAt) {
			w.readyAt = r
		}
	}
	return w
}
