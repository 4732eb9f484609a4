// The tenant page's usage chart: the last 7 days' delivered and failed sends per hour, from the
// page's data attribute, drawn by Chart.js (Debian's libjs-chart.js, served at
// /console/chart.min.js). No inline script: the console's Content-Security-Policy allows none.
"use strict";
(function () {
  const canvas = document.getElementById("usage-chart");
  if (!canvas || typeof Chart === "undefined") return;
  const series = JSON.parse(canvas.dataset.series);
  const labels = series.hours.map(function (hour) { return hour.slice(5, 13).replace("T", " ") + "h"; });
  new Chart(canvas, {
    type: "bar",
    data: {
      labels: labels,
      datasets: [
        { label: "delivered", data: series.delivered, backgroundColor: "#2e7d32", stack: "sends" },
        { label: "failed", data: series.failed, backgroundColor: "#c62828", stack: "sends" }
      ]
    },
    options: {
      animation: false,
      responsive: true,
      maintainAspectRatio: false,
      scales: {
        x: { stacked: true, ticks: { maxTicksLimit: 14 } },
        y: { stacked: true, beginAtZero: true, title: { display: true, text: "sends per hour (UTC)" } }
      },
      plugins: { legend: { position: "bottom" } }
    }
  });
})();
