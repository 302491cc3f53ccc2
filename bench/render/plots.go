package render

// section is one benchmark's part of the document.
type section struct {
	Bench string // bench/NAME
	File  string // its results file
	Ran   bool   // its results were found
	Meta  string // how that run was made (commit, date, flags)
	Body  string // tables and computed statements
	Plots []plotRef
}

// plotRef is a PNG of a section, as the markdown links it.
type plotRef struct {
	File string // NAME.png
	Alt  string
	Note string // printed under the plot, when set
}

// Plot is a plot the document links, as data: *BoxPlot or *LinePlot.
// bench/report draws it into NAME.png.
type Plot interface {
	// PlotName is the plot's file name without ".png".
	PlotName() string
}

// KnownPlots returns the name of every plot a document can link; a PNG of
// one of these names that a run does not draw is removed from the plots
// directory, so no stale figure stays beside the report.
func KnownPlots() []string {
	return []string{"startup", "tti", "rootfs", "scaling", "memory", "workflow", "build", "agent"}
}

type plotSet struct{ items []Plot }

func (ps *plotSet) add(sec *section, p Plot, alt string) *plotRef {
	ps.items = append(ps.items, p)
	sec.Plots = append(sec.Plots, plotRef{File: p.PlotName() + ".png", Alt: alt})
	return &sec.Plots[len(sec.Plots)-1]
}

// boxNote explains the box plots under each of them.
const boxNote = "Box: the middle half of the samples; thick line: the median; whiskers: the last sample within 1.5 box lengths; dots: samples beyond."

// goalNote explains the goal ticks of a box plot.
const goalNote = " Red tick: the row's goal for its p50."

// BoxRow is one distribution of a box plot.
type BoxRow struct {
	Label   string
	Samples []float64
	// Goal, when positive, is drawn as a red tick across the row.
	Goal float64
}

// BoxPlot draws distributions side by side, horizontally, the first row
// at the top: box = the quartiles, the line in it = the median, whiskers
// to the last sample within 1.5 IQR, dots beyond, the median written
// beside each row.
type BoxPlot struct {
	Name, Title, XLabel string
	Rows                []BoxRow
	// Log puts the x axis on a log scale (samples ≤ 0 are left out).
	Log bool
}

// PlotName implements Plot.
func (b *BoxPlot) PlotName() string { return b.Name }

// Series is one line of a line plot.
type Series struct {
	Name   string
	X, Y   []float64
	Dashed bool
	// Color is 1 + an index into the palette (0: by position); a p50 and
	// its p95 share one.
	Color int
}

// LinePlot draws series against a shared x axis, with points at the
// measured x values, and optionally a horizontal goal line.
type LinePlot struct {
	Name, Title, XLabel, YLabel string
	Series                      []Series
	LogX                        bool
	// YFromZero starts the y axis at 0 (otherwise it may be logarithmic
	// when the values span more than 30×).
	YFromZero bool
	// HLine, when positive, is drawn as a dashed red line labelled
	// HLineLabel.
	HLine      float64
	HLineLabel string
}

// PlotName implements Plot.
func (l *LinePlot) PlotName() string { return l.Name }
