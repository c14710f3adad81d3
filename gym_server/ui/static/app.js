// The rollout inspector's one script: draws the charts of a page with uPlot (vendored, see LICENSE.uPlot)
// from the JSON the server embedded in it. Nothing else runs client-side, and nothing loads from elsewhere.
"use strict";

const PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf"];

function seriesOf(names) {
  // Points always shown: a run that fills one time bucket is a point, not a line.
  return names.map((name, i) => ({
    label: name,
    stroke: PALETTE[i % PALETTE.length],
    width: 2,
    spanGaps: true,
    points: { show: true, size: 7, fill: PALETTE[i % PALETTE.length] },
  }));
}

function drawChart(element, data) {
  const kind = element.dataset.chart;
  const lines = kind === "failures" ? data.failures : data[kind];
  const names = Object.keys(lines || {});
  if (!data.times.length || !names.length) {
    element.classList.add("empty");
    element.textContent = kind === "failures" ? "No failures." : "No data.";
    return;
  }
  const scale = kind === "failures" ? {} : { y: { range: kind === "success" ? [0, 1] : (u, lo, hi) => [Math.min(0, lo), Math.max(1, hi)] } };
  const options = {
    width: element.clientWidth || 400,
    height: 220,
    scales: { x: { time: true }, ...scale },
    series: [{}, ...seriesOf(names)],
    legend: { live: false },
  };
  new uPlot(options, [data.times, ...names.map((name) => lines[name])], element);
}

document.addEventListener("DOMContentLoaded", () => {
  for (const element of document.querySelectorAll("[data-chart]")) {
    const source = document.getElementById(element.dataset.source);
    drawChart(element, JSON.parse(source.textContent));
  }
});
