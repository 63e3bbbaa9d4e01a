package broker

import (
	"container/heap"
	"slices"
)

// seqHeap orders available messages by sequence number. Each stored message records its
// index so that it can be removed from the middle when it is settled or expires.
type seqHeap []*stored

func (h seqHeap) Len() int           { return len(h) }
func (h seqHeap) Less(i, j int) bool { return h[i].seq < h[j].seq }
func (h seqHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].heapIdx = i
	h[j].heapIdx = j
}

func (h *seqHeap) Push(x any) {
	s := x.(*stored)
	s.heapIdx = len(*h)
	*h = append(*h, s)
}

func (h *seqHeap) Pop() any {
	old := *h
	n := len(old)
	s := old[n-1]
	old[n-1] = nil
	*h = old[:n-1]
	s.heapIdx = -1
	return s
}

func (h *seqHeap) add(s *stored) {
	if s.heapIdx < 0 {
		heap.Push(h, s)
	}
}

func (h *seqHeap) remove(s *stored) {
	if s.heapIdx >= 0 && s.heapIdx < len(*h) && (*h)[s.heapIdx] == s {
		heap.Remove(h, s.heapIdx)
	}
}

func (h *seqHeap) popMin() *stored {
	if len(*h) == 0 {
		return nil
	}
	return heap.Pop(h).(*stored)
}

func (h seqHeap) min() *stored {
	if len(h) == 0 {
		return nil
	}
	return h[0]
}

// slicesSearch finds the first index in the ascending slice whose value is >= v.
func slicesSearch(a []int64, v int64) (int, bool) { return slices.BinarySearch(a, v) }

// sessionHeap orders sessions by the sequence number of their first
// available message.
type sessionHeap []*session

func (h sessionHeap) Len() int           { return len(h) }
func (h sessionHeap) Less(i, j int) bool { return h[i].avail.min().seq < h[j].avail.min().seq }
func (h sessionHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].readyIdx = i
	h[j].readyIdx = j
}

func (h *sessionHeap) Push(x any) {
	ss := x.(*session)
	ss.readyIdx = len(*h)
	*h = append(*h, ss)
}

func (h *sessionHeap) Pop() any {
	old := *h
	n := len(old)
	ss := old[n-1]
	old[n-1] = nil
	*h = old[:n-1]
	ss.readyIdx = -1
	return ss
}

func (h sessionHeap) min() *session {
	if len(h) == 0 {
		return nil
	}
	return h[0]
}
