package harness

import (
	"testing"
	"time"
)

func TestPercentile(t *testing.T) {
	ms := func(v ...int) Durations {
		var d Durations
		for _, x := range v {
			d = append(d, time.Duration(x)*time.Millisecond)
		}
		return d
	}
	cases := []struct {
		d    Durations
		p    float64
		want time.Duration
	}{
		{nil, 50, 0},
		{ms(7), 50, 7 * time.Millisecond},
		{ms(7), 99, 7 * time.Millisecond},
		{ms(4, 1, 3, 2), 50, 2 * time.Millisecond},
		{ms(4, 1, 3, 2), 75, 3 * time.Millisecond},
		{ms(4, 1, 3, 2), 100, 4 * time.Millisecond},
		{ms(1, 2, 3, 4, 5, 6, 7, 8, 9, 10), 10, 1 * time.Millisecond},
		{ms(1, 2, 3, 4, 5, 6, 7, 8, 9, 10), 11, 2 * time.Millisecond},
		{ms(1, 2, 3, 4, 5, 6, 7, 8, 9, 10), 99, 10 * time.Millisecond},
	}
	for _, c := range cases {
		if got := c.d.Percentile(c.p); got != c.want {
			t.Errorf("%v p%v = %v, want %v", c.d, c.p, got, c.want)
		}
	}
	d := ms(3, 1, 2)
	_ = d.Percentile(50)
	if d[0] != 3*time.Millisecond {
		t.Error("Percentile sorted its receiver")
	}
}

func TestSpanTable(t *testing.T) {
	samples := []SpanSample{
		{0, Traffic{}}, {0, Traffic{1, 100}},
		{2, Traffic{1, 400}}, {2, Traffic{1, 600}},
		{1, Traffic{1, 250}},
	}
	rows := SpanTable(samples)
	if len(rows) != 3 || rows[0].Span != 0 || rows[1].Span != 1 || rows[2].Span != 2 {
		t.Fatalf("rows %+v", rows)
	}
	if r := rows[2]; r.Samples != 2 || r.Bytes != 500 || r.BytesPerSpan != 250 || r.MaxBytes != 600 || r.Messages != 1 {
		t.Errorf("span 2: %+v", r)
	}
	if r := rows[0]; r.BytesPerSpan != 0 || r.Bytes != 50 {
		t.Errorf("span 0: %+v", r)
	}
	if with, total := Unconcerned(samples); with != 1 || total != 2 {
		t.Errorf("Unconcerned = %d/%d, want 1/2", with, total)
	}
}

func TestTrafficSub(t *testing.T) {
	if got := (Traffic{5, 900}).Sub(Traffic{2, 100}); got != (Traffic{3, 800}) {
		t.Errorf("Sub = %+v", got)
	}
}
