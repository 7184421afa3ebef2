package bench

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
)

// Plot geometry, in SVG user units.
const (
	plotWidth   = 860
	plotHeight  = 480
	plotLeft    = 80
	plotRight   = 300 // room for the legend
	plotTop     = 50
	plotBottom  = 60
	plotLegendX = plotWidth - plotRight + 24
)

// plotColors are distinguishable colours, one per row in table order.
var plotColors = []string{"#000000", "#1f77b4", "#ff7f0e", "#7f7f7f", "#d62728", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22"}

// Plot writes an SVG chart of ops/s against writers, one line per row, on
// logarithmic axes. The not-durable row is dashed. title heads the chart.
func Plot(w io.Writer, results []Result, title string) error {
	var names []string
	var writers []int
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, r := range results {
		if !slices.Contains(names, r.Name) {
			names = append(names, r.Name)
		}
		if !slices.Contains(writers, r.Writers) {
			writers = append(writers, r.Writers)
		}
		if r.OpsPerSec > 0 {
			lo, hi = min(lo, r.OpsPerSec), max(hi, r.OpsPerSec)
		}
	}
	if len(names) == 0 || math.IsInf(lo, 1) {
		return fmt.Errorf("bench: nothing to plot")
	}
	slices.Sort(writers)
	yLo, yHi := math.Floor(math.Log10(lo)), math.Ceil(math.Log10(hi))
	if yHi == yLo {
		yHi++
	}
	xLo, xHi := math.Log2(float64(writers[0])), math.Log2(float64(writers[len(writers)-1]))
	innerW := float64(plotWidth - plotLeft - plotRight)
	innerH := float64(plotHeight - plotTop - plotBottom)
	x := func(n int) float64 {
		if xHi == xLo {
			return plotLeft + innerW/2
		}
		return plotLeft + (math.Log2(float64(n))-xLo)/(xHi-xLo)*innerW
	}
	y := func(v float64) float64 {
		return plotTop + (yHi-math.Log10(v))/(yHi-yLo)*innerH
	}

	var b bytes.Buffer
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n",
		plotWidth, plotHeight, plotWidth, plotHeight)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="#ffffff"/>`+"\n", plotWidth, plotHeight)
	fmt.Fprintf(&b, `<text x="%d" y="28" font-size="15" font-weight="bold">%s</text>`+"\n", plotLeft, esc(title))
	// Decades on the y axis, with faint lines at 2x and 5x.
	for d := yLo; d <= yHi; d++ {
		for _, m := range []float64{1, 2, 5} {
			v := m * math.Pow(10, d)
			if d == yHi && m > 1 {
				break
			}
			stroke := "#eeeeee"
			if m == 1 {
				stroke = "#cccccc"
				fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end" dominant-baseline="middle">%s</text>`+"\n",
					plotLeft-8, y(v), esc(humanCount(v)))
			}
			fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s"/>`+"\n",
				plotLeft, y(v), plotLeft+innerW, y(v), stroke)
		}
	}
	for _, n := range writers {
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%.1f" stroke="#eeeeee"/>`+"\n", x(n), plotTop, x(n), plotTop+innerH)
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle">%d</text>`+"\n", x(n), plotTop+innerH+18, n)
	}
	fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%.1f" height="%.1f" fill="none" stroke="#000000"/>`+"\n", plotLeft, plotTop, innerW, innerH)
	fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle">concurrent writers (log scale)</text>`+"\n", plotLeft+innerW/2, plotHeight-18)
	fmt.Fprintf(&b, `<text transform="translate(20 %.1f) rotate(-90)" text-anchor="middle">operations per second (log scale)</text>`+"\n", plotTop+innerH/2)

	for i, name := range names {
		color := plotColors[i%len(plotColors)]
		dash := ""
		if lookup, ok := lookupRow(name); ok && !lookup.durable {
			dash = ` stroke-dasharray="6 4"`
		}
		var pts []string
		for _, r := range results {
			if r.Name == name && r.OpsPerSec > 0 {
				pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(r.Writers), y(r.OpsPerSec)))
			}
		}
		// The row the chart is about stands out.
		width := 2
		if name == RowSubmit {
			width = 3
		}
		if len(pts) > 1 {
			fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="%d"%s points="%s"/>`+"\n", color, width, dash, join(pts))
		}
		for _, r := range results {
			if r.Name == name && r.OpsPerSec > 0 {
				fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="3.5" fill="%s"><title>%s, %d writers: %s ops/s</title></circle>`+"\n",
					x(r.Writers), y(r.OpsPerSec), color, esc(name), r.Writers, strconv.FormatFloat(r.OpsPerSec, 'f', 0, 64))
			}
		}
		ly := plotTop + 10 + 22*i
		fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="%d"%s/>`+"\n",
			plotLegendX, ly, plotLegendX+24, ly, color, width, dash)
		fmt.Fprintf(&b, `<text x="%d" y="%d" dominant-baseline="middle">%s</text>`+"\n", plotLegendX+32, ly, esc(name))
	}
	b.WriteString("</svg>\n")
	_, err := w.Write(b.Bytes())
	return err
}

func esc(s string) string {
	var b bytes.Buffer
	xml.EscapeText(&b, []byte(s))
	return b.String()
}

func join(pts []string) string {
	var b bytes.Buffer
	for i, p := range pts {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(p)
	}
	return b.String()
}

// humanCount formats an axis value: 100, 1k, 10k, 1M.
func humanCount(v float64) string {
	switch {
	case v >= 1e6:
		return strconv.FormatFloat(v/1e6, 'f', -1, 64) + "M"
	case v >= 1e3:
		return strconv.FormatFloat(v/1e3, 'f', -1, 64) + "k"
	default:
		return strconv.FormatFloat(v, 'f', -1, 64)
	}
}
