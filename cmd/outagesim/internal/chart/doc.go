// Package chart draws simple line charts as PNG images with the standard
// library and golang.org/x/image's bitmap font: axes with ticks and
// labels, a title, shaded bands, solid, dashed and stepped lines, and a
// legend. It serves outagesim's -plot and nothing else.
package chart
