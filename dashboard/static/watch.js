// The watch page's script (watch.html; dashboard/watch.py plays the game).
//
// Asks watch.json with the page's query (home, away, seed) every half second while the server
// answers 202 (queued, playing: its message and the seconds so far are shown), then animates
// the frames (SVG documents drawn by the game's own draw capability): play/pause (space), one
// frame back or on (← →), a slider over the frames, the speed. window.watchReady turns true
// once the first frame is shown (window.watchFrames: how many); window.watchError holds the
// server's message when the game cannot be watched.
"use strict";
const QUERY = new URLSearchParams(location.search);
const OUTCOME_WORDS = {"1": "won", "0": "drew", "-1": "lost"};
let frames = [], shown = 0, timer = null;
window.watchReady = false;
window.watchError = null;

const $ = (id) => document.getElementById(id);
function setStatus(text, cls) { const s = $("status"); s.textContent = text; s.className = cls || ""; }

// Frames are shown up to 1.4 times their own size, as wide as the page allows.
const ZOOM = 1.4;

function showFrame(k) {
  shown = Math.max(0, Math.min(frames.length - 1, k));
  $("frame").innerHTML = frames[shown];
  const svg = $("frame").querySelector("svg");
  if (svg && svg.width.baseVal.value) svg.style.width = Math.min($("frame").clientWidth, ZOOM * svg.width.baseVal.value) + "px";
  $("frame-slider").value = String(shown);
  $("frame-number").textContent = `frame ${shown + 1} / ${frames.length}`;
  if (shown === frames.length - 1) pause();
}

function pause() {
  if (timer !== null) clearInterval(timer);
  timer = null;
  $("play").textContent = "▶ play";
}

function play() {
  if (shown === frames.length - 1) showFrame(0);
  pause();
  timer = setInterval(() => showFrame(shown + 1), 1000 / Number($("speed").value));
  $("play").textContent = "❚❚ pause";
}

function describe(d) {
  const sides = `${d.home} (side 0) against ${d.away} (side 1)` + (d.races ? `, ${d.races[0]} against ${d.races[1]}` : "");
  const result = d.ended ? `${d.home} ${OUTCOME_WORDS[String(d.outcome)]} (payoff ${d.score >= 0 ? "+" : ""}${d.score})`
    : `the game did not end within its longest game`;
  return `${d.game}, seed ${d.seed}: ${sides}. ${result} after ${d.steps} steps; played and drawn in ${d.seconds.toFixed(1)} s.`;
}

function ready(d) {
  frames = d.frames;
  $("watch-message").hidden = true;
  $("watch-result").textContent = describe(d);
  for (const id of ["play", "prev", "next", "frame-slider"]) $(id).disabled = false;
  $("frame-slider").max = String(frames.length - 1);
  showFrame(0);
  setStatus(`${frames.length} frames`, "");
  window.watchFrames = frames.length;
  window.watchReady = true;
  play();
}

function failed(message) {
  $("watch-message").textContent = message;
  $("watch-message").className = "empty error";
  setStatus("cannot watch this game", "error");
  window.watchError = message;
}

async function ask() {
  let response, body;
  try {
    response = await fetch("watch.json" + location.search, {cache: "no-store"});
    body = await response.json();
  } catch (e) {
    setStatus("dashboard server unreachable (" + e.message + "); retrying", "error");
    setTimeout(ask, 2000);
    return;
  }
  if (response.status === 202) {
    $("watch-message").textContent = `${body.status === "queued" ? "queued" : "playing"}… ${body.message} (${body.elapsed_s} s)`;
    setStatus(body.status + "…", "waiting");
    setTimeout(ask, 500);
  } else if (response.ok) {
    ready(body);
  } else {
    failed(body.message || `HTTP ${response.status}`);
  }
}

function goTo(home, away, seed) {
  location.search = new URLSearchParams({home, away, seed: String(seed)}).toString();
}

function start() {
  const home = QUERY.get("home") || "", away = QUERY.get("away") || "";
  $("watch-players").textContent = `${home} against ${away}`;
  $("watch-title").textContent = `${home} (side 0) against ${away} (side 1), seed ${QUERY.get("seed") || 0}`;
  $("seed").value = QUERY.get("seed") || "0";
  $("play").addEventListener("click", () => (timer === null ? play() : pause()));
  $("prev").addEventListener("click", () => { pause(); showFrame(shown - 1); });
  $("next").addEventListener("click", () => { pause(); showFrame(shown + 1); });
  $("frame-slider").addEventListener("input", (e) => { pause(); showFrame(Number(e.target.value)); });
  $("speed").addEventListener("change", () => { if (timer !== null) play(); });
  $("replay").addEventListener("click", () => goTo(home, away, Math.max(0, Math.floor(Number($("seed").value) || 0))));
  $("swap").addEventListener("click", (e) => { e.preventDefault(); goTo(away, home, QUERY.get("seed") || 0); });
  document.addEventListener("keydown", (e) => {
    if (!frames.length || e.target.tagName === "INPUT" || e.target.tagName === "SELECT") return;
    if (e.key === " ") { e.preventDefault(); timer === null ? play() : pause(); }
    else if (e.key === "ArrowLeft") { pause(); showFrame(shown - 1); }
    else if (e.key === "ArrowRight") { pause(); showFrame(shown + 1); }
  });
  ask();
}

document.addEventListener("DOMContentLoaded", start);
