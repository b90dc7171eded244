// The dashboard in a real browser (tests/launch/test_dashboard.cpp): Debian's chromium, headless,
// driven by puppeteer-core (third_party/npm, installed by scripts/setup.sh). Loads the page, waits
// until it shows a current step of at least MIN_STEP that matches /api/status, that uPlot drew the
// curves, and that the heatmap cell of RANK x SEGMENT is marked a chronic straggler; saves a
// full-page screenshot to SHOT. Prints one JSON line with what it saw; exit 0 when all hold.
//
// usage: node dashboard_browser.js URL SHOT MIN_STEP RANK SEGMENT
"use strict";
const path = require("path");
const puppeteer = require(path.resolve(__dirname, "../../third_party/npm/node_modules/puppeteer-core"));

async function main() {
  const [url, shot, minStep, rank, segment] = process.argv.slice(2);
  if (!segment) throw new Error("usage: node dashboard_browser.js URL SHOT MIN_STEP RANK SEGMENT");
  const browser = await puppeteer.launch({
    executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
    headless: true,
    args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run"],
  });
  try {
    const page = await browser.newPage();
    const errors = [];
    page.on("pageerror", (e) => errors.push(e.message));
    page.on("console", (m) => { if (m.type() === "error") errors.push(m.text()); });
    await page.setViewport({ width: 1280, height: 1100 });
    await page.goto(url, { waitUntil: "load", timeout: 30000 });
    await page.waitForFunction(
      (min) => /^\d+$/.test(document.getElementById("step").textContent) && +document.getElementById("step").textContent >= min,
      { timeout: 60000, polling: 200 }, Number(minStep));
    const sel = `#heatmap td[data-rank="${rank}"][data-segment="${segment}"][data-straggler="chronic"]`;
    await page.waitForSelector(sel, { timeout: 60000 });
    // The page follows the job: within a few polls it shows at least the step /api/status has now.
    const now = await page.evaluate(async () => (await (await fetch("/api/status")).json()).job.step);
    await page.waitForFunction((min) => +document.getElementById("step").textContent >= min,
                               { timeout: 15000, polling: 100 }, now);
    const seen = await page.evaluate(async (sel) => {
      const api = await (await fetch("/api/status")).json();
      const cell = document.querySelector(sel);
      return {
        shown: Number(document.getElementById("step").textContent),
        api_step: api.job.step,
        uplot: typeof uPlot === "function" && document.querySelectorAll(".uplot canvas").length >= 2,
        straggler_cell: cell ? cell.className : null,
        straggler_cells: [...document.querySelectorAll('#heatmap td[data-straggler="chronic"]')]
          .map((td) => `${td.dataset.rank}:${td.dataset.segment}`),
        ranks_rows: document.querySelectorAll("#ranks tbody tr").length,
        state: document.getElementById("job-state").textContent,
      };
    }, sel);
    await page.screenshot({ path: shot, fullPage: true });
    seen.api_step_before = now;
    seen.screenshot = shot;
    seen.page_errors = errors;
    console.log(JSON.stringify(seen));
    const problems = [];
    if (!seen.uplot) problems.push("uPlot did not draw the charts");
    if (seen.api_step === null || seen.shown > seen.api_step || seen.shown < now)
      problems.push(`the page shows step ${seen.shown}; /api/status said ${now}, then ${seen.api_step}`);
    if (errors.length) problems.push("page errors: " + errors.join("; "));
    if (seen.straggler_cells.join(",") !== `${rank}:${segment}`)
      problems.push(`chronic straggler cells ${JSON.stringify(seen.straggler_cells)}, expected only ${rank}:${segment}`);
    if (problems.length) throw new Error(problems.join("; "));
  } finally {
    await browser.close();
  }
}

main().then(() => process.exit(0), (e) => { console.error("FAIL: " + e.message); process.exit(1); });
