package main

import (
	"errors"
	"fmt"
	"image/color"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"

	"github.com/moat-sandbox/moat/bench/internal/stats"
	"github.com/moat-sandbox/moat/bench/render"
)

// dpi is the resolution of the PNGs: a 9-inch plot is 1080 pixels wide.
const dpi = 120

// drawPlots draws every plot into dir as NAME.png and removes the known
// plots (render.KnownPlots) this run did not draw, so no stale figure
// stays beside the report. It returns the files written.
func drawPlots(plots []render.Plot, dir string) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	var written []string
	for _, d := range plots {
		p, w, h, err := build(d)
		if err != nil {
			return written, fmt.Errorf("plot %s: %w", d.PlotName(), err)
		}
		c := vgimg.NewWith(vgimg.UseWH(w, h), vgimg.UseDPI(dpi), vgimg.UseBackgroundColor(color.White))
		// A margin around the plot, so nothing touches the image's edge.
		m := vg.Points(10)
		p.Draw(draw.Crop(draw.New(c), m, -m, m, -m))
		path := filepath.Join(dir, d.PlotName()+".png")
		f, err := os.Create(path)
		if err != nil {
			return written, err
		}
		if _, err := (vgimg.PngCanvas{Canvas: c}).WriteTo(f); err != nil {
			f.Close()
			return written, fmt.Errorf("plot %s: %w", d.PlotName(), err)
		}
		if err := f.Close(); err != nil {
			return written, err
		}
		written = append(written, path)
	}
	for _, name := range render.KnownPlots() {
		if slices.ContainsFunc(plots, func(d render.Plot) bool { return d.PlotName() == name }) {
			continue
		}
		if err := os.Remove(filepath.Join(dir, name+".png")); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return written, err
		}
	}
	return written, nil
}

// build makes the plot of d and its size.
func build(d render.Plot) (*plot.Plot, vg.Length, vg.Length, error) {
	switch d := d.(type) {
	case *render.BoxPlot:
		return buildBox(d)
	case *render.LinePlot:
		return buildLine(d)
	}
	return nil, 0, 0, fmt.Errorf("no drawing for %T", d)
}

// palette: colour-blind-safe (Okabe–Ito), dark enough on white.
var palette = []color.Color{
	color.RGBA{0, 114, 178, 255},   // blue
	color.RGBA{213, 94, 0, 255},    // vermillion
	color.RGBA{0, 158, 115, 255},   // green
	color.RGBA{204, 121, 167, 255}, // purple
	color.RGBA{230, 159, 0, 255},   // orange
	color.RGBA{86, 180, 233, 255},  // sky blue
	color.RGBA{0, 0, 0, 255},       // black
	color.RGBA{140, 86, 75, 255},   // brown
	color.RGBA{110, 110, 110, 255}, // grey
}

var goalColor = color.RGBA{200, 0, 0, 255}

func newPlot(title, xlabel, ylabel string) *plot.Plot {
	p := plot.New()
	p.Title.Text = title
	p.Title.TextStyle.Font.Size = vg.Points(14)
	p.X.Label.Text = xlabel
	p.Y.Label.Text = ylabel
	for _, ax := range []*plot.Axis{&p.X, &p.Y} {
		ax.Label.TextStyle.Font.Size = vg.Points(11)
		ax.Tick.Label.Font.Size = vg.Points(10)
	}
	p.Legend.TextStyle.Font.Size = vg.Points(10)
	p.Title.Padding = vg.Points(8)
	return p
}

// logTicks marks a log axis at 1, 2 and 5 times the powers of ten, with
// unlabelled minor ticks between.
type logTicks struct{}

func (logTicks) Ticks(min, max float64) []plot.Tick {
	if min <= 0 || max <= min {
		return plot.DefaultTicks{}.Ticks(min, max)
	}
	var ts []plot.Tick
	decades := math.Log10(max / min)
	for e := math.Floor(math.Log10(min)); math.Pow(10, e) <= max; e++ {
		base := math.Pow(10, e)
		for m := 1; m <= 9; m++ {
			v := float64(m) * base
			if v < min*(1-1e-9) || v > max*(1+1e-9) {
				continue
			}
			major := m == 1 || (decades < 3.5 && (m == 2 || m == 5))
			t := plot.Tick{Value: v}
			if major {
				t.Label = strconv.FormatFloat(v, 'g', -1, 64)
			}
			ts = append(ts, t)
		}
	}
	return ts
}

// niceTicks marks a linear axis every 1, 2 or 5 times a power of ten,
// about six labelled ticks, with a minor tick between.
type niceTicks struct{}

func (niceTicks) Ticks(min, max float64) []plot.Tick {
	if max <= min {
		return plot.DefaultTicks{}.Ticks(min, max)
	}
	raw := (max - min) / 6
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	step := mag
	for _, m := range []float64{1, 2, 5, 10} {
		if m*mag >= raw {
			step = m * mag
			break
		}
	}
	var ts []plot.Tick
	for v := math.Ceil(min/step) * step; v <= max+step*1e-9; v += step {
		v = math.Round(v/step) * step
		ts = append(ts, plot.Tick{Value: v, Label: strconv.FormatFloat(v, 'f', -1, 64)})
		if minor := v + step/2; minor <= max {
			ts = append(ts, plot.Tick{Value: minor})
		}
	}
	return ts
}

// ---- box plots ----

// buildBox draws b: each row's box (the quartiles), median, whiskers to
// the last sample within 1.5 IQR and dots beyond, horizontally, the first
// row at the top, the median written beside it.
func buildBox(b *render.BoxPlot) (*plot.Plot, vg.Length, vg.Length, error) {
	p := newPlot(b.Title, b.XLabel, "")
	n := len(b.Rows)
	rowH := vg.Inch * 0.42
	h := vg.Length(n)*rowH + 1.5*vg.Inch
	grid := plotter.NewGrid()
	grid.Horizontal.Color = nil
	p.Add(grid)
	names := make([]string, n)
	lo, hi := math.Inf(1), math.Inf(-1)
	var labels plotter.XYs
	var texts []string
	for i, r := range b.Rows {
		loc := float64(n - 1 - i) // the first row at the top
		names[n-1-i] = r.Label
		var vals plotter.Values
		for _, v := range r.Samples {
			if !b.Log || v > 0 {
				vals = append(vals, v)
			}
		}
		if len(vals) == 0 {
			continue
		}
		bp, err := plotter.NewBoxPlot(rowH*0.55, loc, vals)
		if err != nil {
			return nil, 0, 0, err
		}
		bp.Horizontal = true
		c := palette[i%len(palette)]
		bp.BoxStyle.Color = c
		bp.BoxStyle.Width = vg.Points(1.2)
		bp.MedianStyle.Color = c
		bp.MedianStyle.Width = vg.Points(2.5)
		bp.WhiskerStyle.Color = c
		bp.GlyphStyle.Color = c
		bp.GlyphStyle.Radius = vg.Points(1.8)
		bp.FillColor = lighten(c)
		p.Add(bp)
		lo, hi = math.Min(lo, bp.Min), math.Max(hi, bp.Max)
		if r.Goal > 0 {
			l, err := plotter.NewLine(plotter.XYs{{X: r.Goal, Y: loc - 0.38}, {X: r.Goal, Y: loc + 0.38}})
			if err != nil {
				return nil, 0, 0, err
			}
			l.Color = goalColor
			l.Width = vg.Points(2.5)
			p.Add(l)
			lo, hi = math.Min(lo, r.Goal), math.Max(hi, r.Goal)
		}
		// The median, written right of the row's last mark.
		labels = append(labels, plotter.XY{X: math.Max(bp.Max, r.Goal), Y: loc})
		sum, _ := stats.Summarize(vals)
		texts = append(texts, "p50 "+render.Num(sum.P50)+" ms")
	}
	if len(labels) > 0 {
		lb, err := plotter.NewLabels(plotter.XYLabels{XYs: labels, Labels: texts})
		if err != nil {
			return nil, 0, 0, err
		}
		for i := range lb.TextStyle {
			lb.TextStyle[i].Font.Size = vg.Points(9.5)
			lb.TextStyle[i].YAlign = draw.YCenter
			lb.TextStyle[i].Color = color.RGBA{60, 60, 60, 255}
		}
		lb.Offset = vg.Point{X: vg.Points(7)}
		p.Add(lb)
	}
	p.NominalY(names...)
	p.Y.Min, p.Y.Max = -0.6, float64(n)-0.4
	if b.Log && lo > 0 {
		p.X.Scale = plot.LogScale{}
		p.X.Tick.Marker = logTicks{}
		p.X.Min, p.X.Max = lo/1.25, hi*1.25
	} else if !math.IsInf(lo, 0) {
		p.X.Min, p.X.Max = math.Min(0, lo), hi*1.05
		p.X.Tick.Marker = niceTicks{}
	}
	return p, 9 * vg.Inch, h, nil
}

// lighten mixes c with white, for box fills.
func lighten(c color.Color) color.Color {
	r, g, b, _ := c.RGBA()
	mix := func(v uint32) uint8 { return uint8((v>>8)/4 + 255*3/4) }
	return color.RGBA{mix(r), mix(g), mix(b), 255}
}

// ---- line plots ----

// buildLine draws l: each series as a line with points at its x values,
// on a shared x axis, and the goal line.
func buildLine(l *render.LinePlot) (*plot.Plot, vg.Length, vg.Length, error) {
	p := newPlot(l.Title, l.XLabel, l.YLabel)
	p.Add(plotter.NewGrid())
	var xs []float64
	ylo, yhi := math.Inf(1), math.Inf(-1)
	for i, s := range l.Series {
		pts := make(plotter.XYs, len(s.X))
		for j := range s.X {
			pts[j] = plotter.XY{X: s.X[j], Y: s.Y[j]}
			if !slices.Contains(xs, s.X[j]) {
				xs = append(xs, s.X[j])
			}
			ylo, yhi = math.Min(ylo, s.Y[j]), math.Max(yhi, s.Y[j])
		}
		line, points, err := plotter.NewLinePoints(pts)
		if err != nil {
			return nil, 0, 0, err
		}
		ci := i
		if s.Color > 0 {
			ci = s.Color - 1
		}
		c := palette[ci%len(palette)]
		line.Color = c
		line.Width = vg.Points(2)
		if s.Dashed {
			line.Dashes = []vg.Length{vg.Points(6), vg.Points(3)}
		}
		points.Color = c
		points.Shape = plotShape(i)
		points.Radius = vg.Points(3.5)
		p.Add(line, points)
		p.Legend.Add(s.Name, line, points)
	}
	slices.Sort(xs)
	if len(xs) == 0 {
		return nil, 0, 0, errors.New("no points")
	}
	xlo, xhi := xs[0], xs[len(xs)-1]
	if l.LogX {
		p.X.Scale = plot.LogScale{}
		p.X.Min, p.X.Max = xlo/1.6, xhi*1.6
	} else {
		pad := (xhi - xlo) * 0.05
		if pad == 0 {
			pad = math.Max(1, xlo*0.1)
		}
		p.X.Min, p.X.Max = xlo-pad, xhi+pad
	}
	ticks := make([]plot.Tick, len(xs))
	for i, x := range xs {
		ticks[i] = plot.Tick{Value: x, Label: strconv.FormatFloat(x, 'f', -1, 64)}
	}
	p.X.Tick.Marker = plot.ConstantTicks(ticks)
	if l.HLine > 0 {
		g, err := plotter.NewLine(plotter.XYs{{X: p.X.Min, Y: l.HLine}, {X: p.X.Max, Y: l.HLine}})
		if err != nil {
			return nil, 0, 0, err
		}
		g.Color = goalColor
		g.Width = vg.Points(2)
		g.Dashes = []vg.Length{vg.Points(8), vg.Points(4)}
		p.Add(g)
		p.Legend.Add(l.HLineLabel, g)
		ylo, yhi = math.Min(ylo, l.HLine), math.Max(yhi, l.HLine)
	}
	// Room above the data for the legend, top left.
	legend := float64(len(l.Series)+1) * 0.09
	if l.YFromZero || ylo >= 0 && yhi/math.Max(ylo, 1e-9) < 30 {
		p.Y.Min = 0
		p.Y.Max = yhi * (1.08 + legend)
		p.Y.Tick.Marker = niceTicks{}
	} else {
		p.Y.Scale = plot.LogScale{}
		p.Y.Tick.Marker = logTicks{}
		p.Y.Min = ylo / 1.3
		p.Y.Max = yhi * math.Pow(yhi/ylo, legend+0.05)
	}
	p.Legend.Top = true
	p.Legend.Left = true
	p.Legend.XOffs = vg.Points(8)
	p.Legend.YOffs = -vg.Points(4)
	p.Legend.Padding = vg.Points(4)
	return p, 9 * vg.Inch, 5.5 * vg.Inch, nil
}

func plotShape(i int) draw.GlyphDrawer {
	shapes := []draw.GlyphDrawer{draw.CircleGlyph{}, draw.SquareGlyph{}, draw.TriangleGlyph{}, draw.PyramidGlyph{}, draw.CrossGlyph{}, draw.RingGlyph{}}
	return shapes[i%len(shapes)]
}
