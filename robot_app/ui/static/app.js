// Touchscreen UI: status stream, route planning with confirmation, STOP. No external resources.
"use strict";
const $ = (id) => document.getElementById(id);
let plan = null;
let mapData = null;
let robotXY = null;      // robot position in the map frame (m), from the status stream
let robotYaw = null;     // its heading (rad, CCW from east) when the fused pose knows it
let mapError = "";       // why there is no map, for the Map screen
let startNode = null;    // chosen on the map with "Set start"; null = nearest node to the GPS fix
let pickingStart = false;
const thumbs = {};      // node id -> Image of its first map image

// The session token (robot_app/ui/server.py): the kiosk launcher opens /#token=..., read once here and kept
// for this tab (sessionStorage) and as a same-site cookie for image reads; with [ui] auth = "pin" the
// operator types the PIN when a command is refused for want of it.
let token = sessionStorage.getItem("robot_token") || "";
(function takeTokenFromUrl() {
  const m = location.hash.match(/token=([A-Za-z0-9_\-]+)/);
  if (m) {
    token = m[1];
    history.replaceState(null, "", location.pathname);  // not left in the address bar or the history
  }
  if (token) {
    sessionStorage.setItem("robot_token", token);
    document.cookie = `robot_token=${token}; SameSite=Strict; path=/`;
  }
})();

async function askPin() {
  const pin = window.prompt("PIN for this robot");
  if (!pin) return false;
  const r = await fetch("/api/session", { method: "POST", headers: { "Content-Type": "application/json" },
                                          body: JSON.stringify({ pin }) });
  const data = await r.json().catch(() => ({}));
  if (!r.ok || !data.token) throw new Error(data.error || "wrong PIN");  // the command's refusal says it
  token = data.token;
  sessionStorage.setItem("robot_token", token);
  document.cookie = `robot_token=${token}; SameSite=Strict; path=/`;
  return true;
}

async function post(path, body, retried) {
  const r = await fetch(path, { method: "POST", headers: { "Content-Type": "application/json", "X-Robot-Token": token },
                                body: JSON.stringify(body || {}) });
  const data = await r.json().catch(() => ({ error: "bad reply" }));
  if (r.status === 401 && !retried && await askPin()) return post(path, body, true);
  if (!r.ok) throw new Error(data.error || r.statusText);
  return data;
}

// Refusals: a command the robot refused (any non-2xx answer) says why, in words, in the message area of the
// screen it was pressed on, and stays there until the operator acts again on that screen (presses a button,
// edits a field) or REFUSAL_MS pass; meanwhile the status stream's messages (say) are kept, not shown, and
// come back when the refusal goes. Every command goes through command(), so no handler does this itself.
const REFUSAL_MS = 10000;
const MESSAGE_AREA = { route: "message", map: "map-hint", task: "task-message", record: "rec-message",
                       status: "status-message" };
const refusalTimers = {};  // message area id -> the timer that ends its refusal
function activeScreen() { return document.querySelector(".screen.active").id.replace("screen-", ""); }
function say(id, text) {
  const el = $(id);
  el.dataset.said = text;
  if (!(id in refusalTimers)) el.textContent = text;
}
function refuse(id, text) {
  clearRefusal(id);
  const el = $(id);
  el.textContent = text;
  el.classList.add("refused");
  refusalTimers[id] = setTimeout(() => clearRefusal(id), REFUSAL_MS);
}
function clearRefusal(id) {
  if (!(id in refusalTimers)) return;
  clearTimeout(refusalTimers[id]);
  delete refusalTimers[id];
  const el = $(id);
  el.classList.remove("refused");
  el.textContent = el.dataset.said || "";
}
// el's tap runs fn (async; it throws on a refusal); `what` names the command in the refusal ("Go refused: ...")
function command(el, what, fn) {
  el.onclick = async (ev) => {
    const area = MESSAGE_AREA[activeScreen()];
    clearRefusal(area);
    try { await fn(ev); } catch (e) { refuse(area, `${what}: ${e.message}`); }
  };
}
// acting again on a screen (a button, a key of the on-screen keyboard, an edit) ends its refusal
Object.entries(MESSAGE_AREA).forEach(([screen, id]) => {
  const sec = $("screen-" + screen);
  sec.addEventListener("click", (ev) => { if (ev.target.closest("button")) clearRefusal(id); }, true);
  sec.addEventListener("input", () => clearRefusal(id));
});

function pill(el, text, cls) { el.textContent = text; el.className = "pill " + (cls || ""); }

// the Status screen: one panel per concern, each row a label, a value and good / bad / warning
function fill(id, rows) {
  const dl = $(id);
  dl.innerHTML = "";
  rows.forEach(([label, value, cls]) => {
    const dt = document.createElement("dt"); dt.textContent = label;
    const dd = document.createElement("dd"); dd.textContent = value; if (cls) dd.className = cls;
    dl.append(dt, dd);
  });
}
function warmText(w) {
  if (!w || w.state === "pending") return "not loaded yet";
  if (w.state === "warming") return `loading ${w.current || ""} (the first plan waits for it)`;
  const failed = w.steps.filter((x) => x.error);
  return failed.length ? `loaded; ${failed.map((x) => x.step).join(", ")} failed (loads on first use)` : "loaded";
}
function kernelsText(k) {
  if (!k || !k.backend) return "";
  return k.backend === "compiled" ? "; walk search: compiled kernels" : "; walk search: numba JIT";
}
function showPanels(s) {
  const fmt = (v, unit, digits) => (v === null || v === undefined ? "—" : `${Number(v).toFixed(digits)} ${unit}`);
  const gps = s.gps;
  const cam = s.camera;
  fill("panel-devices", [
    ["Base MCU", s.mcu_link ? "connected" : "not connected", s.mcu_link ? "ok" : "bad"],
    ["E-stop", s.estop_latched ? "latched (release on Route)" : s.hardware_estop ? "hardware stop pressed" : "clear",
     s.estop_latched || s.hardware_estop ? "bad" : "ok"],
    ["Battery", fmt(s.battery_v, "V", 1), s.battery_v ? "" : "warn"],
    ["GPS", gps ? `fix quality ${gps.quality}, HDOP ${gps.hdop === null ? "—" : gps.hdop}` : "no fix", gps ? "ok" : "warn"],
    ["Camera", cam ? `${cam.frames} frames, last ${fmt(cam.age_s, "s ago", 1)}` : "none configured",
     cam && cam.age_s !== null && cam.age_s < 1 ? "ok" : "warn"],
    ["Pose", s.pose ? `${s.pose.v_mps.toFixed(2)} m/s, heading ${s.pose.yaw_known ? "known" : "unknown"}` : "no fused pose",
     s.pose ? "ok" : "warn"],
    ["Command", `${s.command.source || "none"} ${s.command.v_mps.toFixed(2)} m/s, ${s.command.omega_radps.toFixed(2)} rad/s`, ""],
    ["Planners", warmText(s.warm_up) + kernelsText(s.search_kernels),
     s.warm_up && s.warm_up.state === "done" ? "ok" : "warn"],
  ]);
  const m = s.mission, pr = m.progress || {};
  fill("panel-mission", [
    ["State", m.state, m.state === "error" ? "bad" : ""],
    ["Message", m.message || "—", ""],
    ["Driver", pr.driver || pr.mode || "—", ""],
    ["Walk index", pr.walk_index === undefined ? "—" : `${pr.walk_index} of ${pr.walk_nodes || "?"}`, ""],
    ["Re-plans", String(pr.replans || 0), ""],
    ["Disengagements", String(m.disengagements), m.disengagements ? "warn" : "ok"],
    ["Task", `${s.task.state}${s.task.message ? ": " + s.task.message : ""}`, ""],
    ["Recording", s.recording.recording ? `${s.recording.recording} (${s.recording.frames} frames)` : "no", ""],
  ]);
  fill("panel-safety", [s.safety ? [s.safety.kind, s.safety.message, "bad"] : ["All clear", "no fault", "ok"]]);
  fill("panel-models", Object.entries(s.models).map(([k, v]) => [k, v, v === "installed" ? "ok" : "warn"]));
  fill("panel-components", Object.entries(s.components).map(([k, v]) => [k, v, v === "running" ? "ok" : "bad"]));
}

// While a route is driven: the camera (refreshed twice a second), the next subgoal's image, who drives and
// how far along the walk the robot is; STOP stays in the header above it all.
let cameraTimer = null;
const DRIVERS = { vnm: "the visual navigation model", gps: "GPS", turn: "turning in place",
                  back: "backing off after a collision", stop: "standing still" };
function showDriving(s) {
  const running = s.mission.state === "running", pr = s.mission.progress || {};
  $("driving").hidden = !running;
  $("camera-view").hidden = !s.camera;
  if (running && s.camera && cameraTimer === null) {
    const refresh = () => { $("camera-img").src = `/api/camera/latest?t=${Date.now()}`; };
    refresh();
    cameraTimer = setInterval(refresh, 500);
  } else if ((!running || !s.camera) && cameraTimer !== null) {
    clearInterval(cameraTimer); cameraTimer = null;
  }
  if (!running) return;
  const d = pr.driver ? pr.driver.toLowerCase() : "";
  $("drive-driver").textContent = d ? `Driving: ${DRIVERS[d] || d}` : `Driving (${pr.mode || "?"} mode)`;
  const n = pr.walk_nodes || 0, i = pr.walk_index === undefined ? 0 : pr.walk_index;
  $("drive-progress").value = n > 1 ? Math.min(i / (n - 1), 1) : 0;
  $("drive-text").textContent = n ? `node ${i + 1} of ${n} on the walk` : "";
}

// one learned item (core/lasp/knowledge.py as_dict) as the line its approval would add to the knowledge
function learnedText(e) {
  const words = (n) => String(n).replace(/[-_]/g, " ");
  if (e.kind === "precondition") return `+ before "${words(e.action)}", require ${e.pddl}`;
  if (e.kind === "object") return `+ a new ${words(e.type)}: ${words(e.name)}`;
  if (e.kind === "property") {
    return `+ a new ${e.numeric ? "quantity" : "fact"} "${words(e.name)}" of ${(e.params || []).map(words).join(", ")}`
      + (e.values_from ? ` (values from ${e.values_from})` : "")
      + ((e.effects || []).length ? `; changed by ${e.effects.join("; ")}` : "");
  }
  return "+ " + JSON.stringify(e);
}

function showStatus(s) {
  pill($("st-link"), s.mcu_link ? "MCU link" : "MCU DOWN", s.mcu_link ? "ok" : "bad");
  pill($("st-gps"), s.gps ? `GPS q${s.gps.quality}` : "no GPS fix", s.gps ? "ok" : "warn");
  pill($("st-batt"), s.battery_v ? `${s.battery_v.toFixed(1)} V` : "battery ?", "");
  const stopped = s.estop_latched || s.hardware_estop;
  pill($("st-estop"), stopped ? "STOPPED" : "e-stop clear", stopped ? "bad" : "ok");
  const driver = s.mission.progress && s.mission.progress.driver;
  pill($("st-mode"), s.mission.state + (s.mission.state === "running" && driver ? ` (${driver.toUpperCase()})` : ""),
       s.mission.state === "running" ? "ok" : "");
  $("st-mode").dataset.state = s.mission.state;
  if (s.task && s.task.state === "running" && s.mission.state !== "running") {  // a task between its drives
    pill($("st-mode"), s.task.question ? "task: your turn" : "task running", s.task.question ? "warn" : "ok");
  }
  if (s.mission.message) say("message", s.mission.message);
  if (s.safety) { pill($("st-mode"), "SAFETY: " + s.safety.kind, "bad"); say("message", s.safety.message); }
  goHeld = s.estop_latched ? "e-stop latched: release it first"
    : s.hardware_estop ? "hardware stop pressed: release it first" : "";
  showGo(Boolean(plan && s.mission.state === "confirm"));
  showDriving(s);
  const sub = s.mission.progress && s.mission.progress.subgoal_node;
  $("subgoal").hidden = sub === undefined || sub === null;
  if (sub !== undefined && sub !== null && $("subgoal-img").dataset.node !== String(sub)) {
    $("subgoal-img").dataset.node = String(sub);
    $("subgoal-img").src = `/api/map/image/${sub}`;
  }
  showPanels(s);
  $("status-json").textContent = JSON.stringify(s, null, 2);
  if (mapData && s.robot_utm_m && mapData.origin_utm_m) {
    robotXY = [s.robot_utm_m[0] - mapData.origin_utm_m[0], s.robot_utm_m[1] - mapData.origin_utm_m[1]];
    robotYaw = s.pose && s.pose.yaw_known ? s.pose.yaw_rad : null;
    if ($("screen-map").classList.contains("active")) drawMap();
  }

  const t = s.task;
  $("task-trace").innerHTML = "";
  (t.trace || []).slice(-12).forEach((e) => {
    const li = document.createElement("li");
    li.textContent = e.kind + ": " + (e.step || e.error || e.observation || e.status || "") +
      (e.observation && e.step ? " (" + e.observation + ")" : "");
    $("task-trace").append(li);
  });
  say("task-message", t.message || "");
  $("task-question").hidden = !t.question;
  if (t.question) { $("task-question-text").textContent = t.question.text; $("task-question").dataset.id = t.question.id; }
  const learned = t.awaiting_approval || [];
  $("task-learned").hidden = learned.length === 0;
  $("task-learned-list").innerHTML = "";
  learned.forEach((e) => {
    const li = document.createElement("li");
    li.textContent = learnedText(e);  // as a diff of the robot's knowledge: what would be added
    li.className = "diff-add";
    $("task-learned-list").append(li);
  });
  $("task-plan").innerHTML = "";
  (t.plan || []).forEach((step) => {  // the step being done now is marked
    const li = document.createElement("li"); li.textContent = step;
    if (t.current && t.current.step === step) li.className = "current";
    $("task-plan").append(li);
  });
  const r = s.recording;
  const saved = r.last_saved ? `saved ${r.last_saved.log}: ${r.last_saved.frames} frames. ` : "";
  // a recording that stopped by itself (full disk) says why until the next recording starts
  say("rec-message", (r.recording ? `recording ${r.recording}: ${r.frames} frames. `
    : (r.stopped ? `${r.stopped}. ` : saved)) + (r.build.message || ""));
  $("rec-message").classList.toggle("bad", Boolean(r.stopped) && !r.recording);
}

let statusUpdates = 0;  // status messages received (the browser tests count them)
function connect() {
  const es = new EventSource("/api/events");
  es.onmessage = (ev) => { statusUpdates++; showStatus(JSON.parse(ev.data)); };
  es.onerror = () => { pill($("st-link"), "UI link lost", "bad"); };
}

// The landmarks of plan p judged not in the map (their names), from the plan or its grounding.
function absentLandmarks(p) {
  if (!p) return [];
  if (p.absent_landmarks) return p.absent_landmarks;
  return (p.grounding ? p.grounding.landmarks : []).filter((g) => g.found === false).map((g) => g.name);
}

// Go for a plan with a landmark judged not in the map takes two taps: the first turns Go into "Confirm Go"
// (for CONFIRM_MS), the second drives.
const CONFIRM_MS = 10000;
let goArmed = false, goTimer = null;
function disarmGo() {
  goArmed = false;
  clearTimeout(goTimer);
  $("go-label").textContent = "Go";
  $("go").classList.remove("confirm");
}
// Go while the e-stop is latched (or the hardware stop pressed): disabled, the reason on it; back on release.
let goHeld = "";  // why Go is held ("" when it is not), from the status stream
function showGo(planned) {
  if (goHeld && goArmed) disarmGo();  // a confirmation does not outlive a STOP
  $("go").disabled = !planned || Boolean(goHeld);
  $("go").classList.toggle("held", Boolean(goHeld));
  $("go-why").textContent = goHeld;
  $("go-why").hidden = !goHeld;
}

function showPlan(p) {
  const list = $("landmarks");
  list.innerHTML = "";
  disarmGo();
  const grounded = p.grounding ? p.grounding.landmarks : [];
  p.landmarks.forEach((lm, i) => {
    const li = document.createElement("li");
    const g = grounded.length === p.landmarks.length ? grounded[i] : null;  // the same order
    const absent = lm.found === false || (g && g.found === false);
    if (absent) li.className = "absent";
    const img = document.createElement("img");
    img.src = `/api/map/image/${lm.node}`;
    img.onerror = () => { img.style.visibility = "hidden"; };
    img.alt = lm.name;
    const cap = document.createElement("div");
    cap.className = "cap";
    cap.textContent = (lm.name === `node ${lm.node}` ? lm.name : `${lm.name} (node ${lm.node})`)
      + (g && typeof g.best_cosine === "number" ? ` · match ${g.best_cosine.toFixed(2)}` : "");
    const thumb = document.createElement("div");  // the image, with the absent tag over its foot
    thumb.className = "thumb";
    thumb.append(img);
    if (absent) {
      const tag = document.createElement("div");
      tag.className = "absent-tag";
      tag.textContent = "not in the map";
      thumb.append(tag);
    }
    li.append(thumb, cap);
    list.append(li);
  });
  const absent = absentLandmarks(p);
  $("absent").hidden = absent.length === 0;
  $("absent").textContent = absent.length ? `Not in the map: ${absent.join(", ")}. Go asks to confirm.` : "";
  say("message", `walk of ${p.nodes.length} nodes, ~${Math.round(p.length_m)} m: check, then Go`);
  $("screen-route").classList.add("planned");  // a small screen makes room for the images and Go
  colourBy = -1;
  drawMap();
}

// The operator's view of the map: zoom factor k and shift (tx, ty) in canvas pixels over the fitted map.
// {k: 1, tx: 0, ty: 0} is the whole map fitted to the canvas (on open and with Fit).
let view = { k: 1, tx: 0, ty: 0 };
const ZOOM_MIN = 0.5, ZOOM_MAX = 400;
const SHOW_IDS_BELOW = 60;  // node ids are written once no more than this many nodes are in sight
const EDGE_COLOURS = { temporal: "#777777", vnm: "#0a7d8c", gps: "#e07000", manual: "#8e24aa" };

// map metres -> canvas pixels (the same scale on both axes): the fit, then the operator's zoom and pan
function projectXY() {
  const c = $("map");
  const xs = mapData.xy_m.map((p) => p[0]), ys = mapData.xy_m.map((p) => p[1]);
  const w = Math.max(...xs) || 1, h = Math.max(...ys) || 1, k = Math.min((c.width - 40) / w, (c.height - 40) / h);
  const ox = (c.width - w * k) / 2, oy = (c.height - h * k) / 2;  // the map centred on the canvas
  const f = (x, y) => [(ox + x * k) * view.k + view.tx, (c.height - oy - y * k) * view.k + view.ty];
  f.pxPerM = k * view.k;
  return f;
}

// zoom by `factor` keeping the canvas point (cx, cy) where it is
function zoomAt(cx, cy, factor) {
  const k = Math.min(Math.max(view.k * factor, ZOOM_MIN), ZOOM_MAX), f = k / view.k;
  view = { k, tx: cx - (cx - view.tx) * f, ty: cy - (cy - view.ty) * f };
  drawMap();
}

function fitMap() { view = { k: 1, tx: 0, ty: 0 }; drawMap(); }

// What the node dots show: -1 = plain (edges coloured by source), i = landmark i's grounding score (the plan
// carries the cosine of its best nodes; the other nodes stay plain). The Colour button steps through them.
let colourBy = -1;
function groundedLandmarks() { return (plan && plan.grounding ? plan.grounding.landmarks : []).filter((g) => g.scores); }

// low -> high score: dark blue, teal, yellow, red (readable on white in sunlight)
function heat(t) {
  const stops = [[30, 40, 160], [0, 150, 150], [240, 200, 0], [220, 0, 0]];
  const x = Math.min(Math.max(t, 0), 1) * (stops.length - 1), i = Math.min(Math.floor(x), stops.length - 2), f = x - i;
  const c = stops[i].map((v, j) => Math.round(v + (stops[i + 1][j] - v) * f));
  return `rgb(${c[0]}, ${c[1]}, ${c[2]})`;
}

function colourLabel() {
  const gs = groundedLandmarks();
  if (colourBy < 0 || colourBy >= gs.length) return "Colour: edges";
  return `Colour: ${gs[colourBy].name}`;
}

// client (CSS) pixels -> canvas pixels
function canvasPoint(c, clientX, clientY) {
  const r = c.getBoundingClientRect();
  return [(clientX - r.left) * c.width / r.width, (clientY - r.top) * c.height / r.height];
}

// a scale bar of a round length (1, 2 or 5 x 10^n m) about 100 px long, bottom left
function drawScale(ctx, c, pxPerM) {
  const target = 100 / pxPerM, p10 = Math.pow(10, Math.floor(Math.log10(target)));
  const m = [1, 2, 5, 10].map((f) => f * p10).reduce((a, b) => (Math.abs(b - target) < Math.abs(a - target) ? b : a));
  const len = m * pxPerM, x = 12, y = c.height - 12;
  ctx.strokeStyle = "#000"; ctx.lineWidth = 3;
  ctx.beginPath(); ctx.moveTo(x, y - 6); ctx.lineTo(x, y); ctx.lineTo(x + len, y); ctx.lineTo(x + len, y - 6); ctx.stroke();
  ctx.fillStyle = "#000"; ctx.font = "bold 16px system-ui, sans-serif"; ctx.fillText(`${m} m`, x + len + 6, y);
}

// thumbnails beside their nodes, each where it overlaps no thumbnail placed before it
function placeThumb(placed, x, y, c) {
  const W = 80, H = 60, spots = [[8, -H - 8], [-W - 8, -H - 8], [8, 8], [-W - 8, 8], [-W / 2, -H - 16], [-W / 2, 16]];
  const fits = (r) => placed.every((q) => r.x + W <= q.x || q.x + W <= r.x || r.y + H <= q.y || q.y + H <= r.y);
  let best = null;
  for (const [dx, dy] of spots) {
    const r = { x: Math.min(Math.max(x + dx, 2), c.width - W - 2), y: Math.min(Math.max(y + dy, 2), c.height - H - 2) };
    if (fits(r)) { best = r; break; }
    if (!best) best = r;
  }
  placed.push(best);
  return best;
}

function projection() {
  const f = projectXY();
  return (i) => f(mapData.xy_m[i][0], mapData.xy_m[i][1]);
}

// CSS pixel position of the map's nodes on the canvas (for taps and tests): one projection for all of them
function nodePixels() {
  const c = $("map"), r = c.getBoundingClientRect(), P = projection();
  return (i) => { const [x, y] = P(i); return [r.left + x * r.width / c.width, r.top + y * r.height / c.height]; };
}
function nodePixel(i) { return nodePixels()(i); }

function drawMap() {
  const c = $("map"), ctx = c.getContext("2d");
  ctx.clearRect(0, 0, c.width, c.height);
  if (!mapData) {
    ctx.fillStyle = "#000"; ctx.font = "bold 20px system-ui, sans-serif";
    ctx.fillText(mapError || "loading the map…", 16, 40);
    return;
  }
  const P = projection(), src = mapData.edge_source || [];
  ctx.lineWidth = view.k > 4 ? 2 : 1;  // edges coloured by what made them (legend under the map)
  mapData.edges.forEach(([a, b], j) => {
    ctx.strokeStyle = EDGE_COLOURS[src[j]] || "#777777";
    ctx.beginPath(); ctx.moveTo(...P(a)); ctx.lineTo(...P(b)); ctx.stroke();
  });
  const r = Math.min(2.5 * Math.sqrt(view.k), 7), inSight = [];
  ctx.fillStyle = "#333";  // the nodes
  mapData.xy_m.forEach((_, i) => {
    const [x, y] = P(i);
    if (x < -10 || y < -10 || x > c.width + 10 || y > c.height + 10) return;
    inSight.push(i);
    ctx.beginPath(); ctx.arc(x, y, r, 0, 2 * Math.PI); ctx.fill();
  });
  const gs = groundedLandmarks();
  coloured = 0;
  if (colourBy >= 0 && colourBy < gs.length) {  // the landmark's grounding over the map, best node ringed
    const sc = gs[colourBy].scores, lo = sc[sc.length - 1][1], hi = sc[0][1];
    for (let j = sc.length - 1; j >= 0; j--) {  // best last, on top
      const [v, cos] = sc[j], [x, y] = P(v);
      ctx.fillStyle = heat(hi > lo ? (cos - lo) / (hi - lo) : 1);
      ctx.beginPath(); ctx.arc(x, y, r + 2, 0, 2 * Math.PI); ctx.fill();
      coloured++;
    }
    const [bx, by] = P(gs[colourBy].best_node);
    ctx.strokeStyle = "#000"; ctx.lineWidth = 3; ctx.beginPath(); ctx.arc(bx, by, r + 7, 0, 2 * Math.PI); ctx.stroke();
    $("map-legend-score").textContent = `"${gs[colourBy].name}": match ${lo.toFixed(2)} blue to ${hi.toFixed(2)} red `
      + `(best ${sc.length} nodes), best node ${gs[colourBy].best_node} ringed`;
  } else {
    $("map-legend-score").textContent = "";
  }
  $("map-colour").textContent = colourLabel();
  $("map-colour").disabled = !gs.length;
  labelsShown = inSight.length <= SHOW_IDS_BELOW;
  if (labelsShown) {  // zoomed in: each node's id beside it, for "drive to node N" and reports
    ctx.font = "bold 14px system-ui, sans-serif"; ctx.lineWidth = 3; ctx.strokeStyle = "#fff"; ctx.fillStyle = "#000";
    inSight.forEach((i) => { const [x, y] = P(i); ctx.strokeText(String(i), x + r + 2, y - r); ctx.fillText(String(i), x + r + 2, y - r); });
  }
  drawScale(ctx, c, projectXY().pxPerM);
  const placed = [];
  if (plan) {
    ctx.strokeStyle = "#0050ff"; ctx.lineWidth = 4; ctx.beginPath();
    plan.nodes.forEach((n, i) => (i ? ctx.lineTo(...P(n)) : ctx.moveTo(...P(n)))); ctx.stroke();
    ctx.fillStyle = "#d00000";
    plan.landmarks.forEach((lm) => {
      const [x, y] = P(lm.node);
      ctx.fillRect(x - 6, y - 6, 12, 12);
      const img = thumbs[lm.node];
      if (img && img.complete && img.naturalWidth) {  // the landmark's node image beside it, not on another
        const r = placeThumb(placed, x, y, c);
        ctx.drawImage(img, r.x, r.y, 80, 60); ctx.strokeStyle = "#d00000"; ctx.lineWidth = 2;
        ctx.strokeRect(r.x, r.y, 80, 60);
      } else if (!img) {
        thumbs[lm.node] = new Image(); thumbs[lm.node].onload = drawMap; thumbs[lm.node].src = `/api/map/image/${lm.node}`;
      }
    });
  }
  if (startNode !== null) {
    const [x, y] = P(startNode); ctx.strokeStyle = "#00a000"; ctx.lineWidth = 4; ctx.strokeRect(x - 8, y - 8, 16, 16);
  }
  if (robotXY) {  // the robot: a filled circle at its GPS position, a line for its heading when known
    const [rx, ry] = projectXY()(robotXY[0], robotXY[1]);
    ctx.fillStyle = "#ff8c00"; ctx.beginPath(); ctx.arc(rx, ry, 9, 0, 2 * Math.PI); ctx.fill();
    if (robotYaw !== null) {  // yaw CCW from east; canvas y points down
      ctx.strokeStyle = "#ff8c00"; ctx.lineWidth = 4; ctx.beginPath(); ctx.moveTo(rx, ry);
      ctx.lineTo(rx + 22 * Math.cos(robotYaw), ry - 22 * Math.sin(robotYaw)); ctx.stroke();
    }
  }
}

// Pan with one finger (or the mouse), pinch or scroll to zoom; a tap that did not move selects a node.
const pointers = new Map();
let dragged = false, labelsShown = false, downAt = null, coloured = 0;
const TAP_SLOP_PX = 8;  // a finger that moved less than this (CSS px) tapped
$("map").addEventListener("pointerdown", (ev) => {
  pointers.set(ev.pointerId, [ev.clientX, ev.clientY]);
  if (pointers.size === 1) { dragged = false; downAt = [ev.clientX, ev.clientY]; }
  $("map").setPointerCapture(ev.pointerId);
});
$("map").addEventListener("pointermove", (ev) => {
  if (!mapData || !pointers.has(ev.pointerId)) return;
  const c = $("map"), before = [...pointers.values()];
  const [px, py] = pointers.get(ev.pointerId);
  pointers.set(ev.pointerId, [ev.clientX, ev.clientY]);
  if (pointers.size === 1) {
    if (!dragged && Math.hypot(ev.clientX - downAt[0], ev.clientY - downAt[1]) < TAP_SLOP_PX) return;
    const [x0, y0] = canvasPoint(c, dragged ? px : downAt[0], dragged ? py : downAt[1]);
    const [x1, y1] = canvasPoint(c, ev.clientX, ev.clientY);
    dragged = true;
    view = { ...view, tx: view.tx + x1 - x0, ty: view.ty + y1 - y0 };
    drawMap();
  } else if (pointers.size === 2) {  // pinch: zoom by the change of the two fingers' distance, about their middle
    const after = [...pointers.values()];
    const d0 = Math.hypot(before[0][0] - before[1][0], before[0][1] - before[1][1]);
    const d1 = Math.hypot(after[0][0] - after[1][0], after[0][1] - after[1][1]);
    dragged = true;
    if (d0 > 0) zoomAt(...canvasPoint(c, (after[0][0] + after[1][0]) / 2, (after[0][1] + after[1][1]) / 2), d1 / d0);
  }
});
["pointerup", "pointercancel"].forEach((t) => $("map").addEventListener(t, (ev) => pointers.delete(ev.pointerId)));
$("map").addEventListener("wheel", (ev) => {
  if (!mapData) return;
  ev.preventDefault();
  zoomAt(...canvasPoint($("map"), ev.clientX, ev.clientY), Math.exp(-ev.deltaY * 0.0015));
}, { passive: false });
const centre = () => [$("map").width / 2, $("map").height / 2];
$("map-zoom-in").onclick = () => { if (mapData) zoomAt(...centre(), 2); };
$("map-zoom-out").onclick = () => { if (mapData) zoomAt(...centre(), 0.5); };
$("map-fit").onclick = () => { if (mapData) fitMap(); };
$("map-colour").onclick = () => {
  const n = groundedLandmarks().length;
  colourBy = n ? (colourBy + 2) % (n + 1) - 1 : -1;  // -1, 0, 1, ..., n-1, -1, ...
  drawMap();
};

// Tap a node on the map: plan the walk to it (works without CLIP), then confirm on the Route screen.
command($("map"), "Plan refused", async (ev) => {
  if (!mapData || dragged) return;
  let best = -1, bestD = 1e9;
  const px = nodePixels();
  mapData.xy_m.forEach((_, i) => {
    const [x, y] = px(i), d = Math.hypot(x - ev.clientX, y - ev.clientY);
    if (d < bestD) { best = i; bestD = d; }
  });
  if (best < 0 || bestD > 40) return;
  if (pickingStart) {
    startNode = best; pickingStart = false;
    $("pick-start").classList.remove("active");
    say("map-hint", `Start: node ${best}. Tap a node to drive there.`);
    drawMap();
    return;
  }
  plan = await post("/api/route/plan", { goal: best, start: startNode });
  document.querySelector('.tab[data-screen="route"]').click();
  clearRefusal("message");  // a new plan: an earlier refusal on the Route screen is about the old one
  showPlan(plan);
  showGo(true);
});
window.robotUi = { nodePixel, view: () => ({ ...view }), labelsShown: () => labelsShown, coloured: () => coloured,
                   statusUpdates: () => statusUpdates };
$("pick-start").onclick = () => {
  pickingStart = !pickingStart;
  $("pick-start").classList.toggle("active", pickingStart);
  say("map-hint", pickingStart ? "Tap the node where the robot stands." : "Tap a node to drive there.");
};

// Recent instructions (kept on this screen's browser) and presets, one tap to reuse
const PRESETS = ["Go past the stop sign, then find the glass building after the white car"];
function recentList() {
  try { return JSON.parse(localStorage.getItem("recent-instructions") || "[]"); } catch (e) { return []; }
}
function remember(text) {
  const list = [text, ...recentList().filter((x) => x !== text)].slice(0, 6);
  try { localStorage.setItem("recent-instructions", JSON.stringify(list)); } catch (e) { /* storage off */ }
  showRecent();
}
function showRecent() {
  const box = $("recent");
  box.innerHTML = "";
  [...recentList(), ...PRESETS.filter((p) => !recentList().includes(p))].slice(0, 6).forEach((text) => {
    const b = document.createElement("button");
    b.textContent = text; b.title = text;
    b.onclick = () => { $("instruction").value = text; };
    box.append(b);
  });
}
showRecent();

// On-screen keyboard for the touchscreen (no physical keyboard on the robot)
const KEYS = ["1234567890", "qwertyuiop", "asdfghjkl'", "zxcvbnm,.-"];
let keyboardTarget = null;
function buildKeyboard() {
  const kb = $("keyboard");
  const press = (ch) => {
    const t = keyboardTarget;
    if (!t) return;
    if (ch === "⌫") t.value = t.value.slice(0, -1); else t.value += ch;
  };
  KEYS.forEach((row) => {
    const r = document.createElement("div"); r.className = "krow";
    [...row].forEach((ch) => {
      const b = document.createElement("button"); b.textContent = ch; b.dataset.key = ch;
      b.onclick = (ev) => { ev.preventDefault(); press(ch); }; r.append(b);
    });
    kb.append(r);
  });
  const last = document.createElement("div"); last.className = "krow";
  [["space", " "], ["⌫", "⌫"], ["hide", null]].forEach(([label, ch]) => {
    const b = document.createElement("button"); b.textContent = label; b.dataset.key = label;
    if (label === "space") b.className = "wide";
    b.onclick = (ev) => { ev.preventDefault(); if (ch === null) hideKeyboard(); else press(ch); };
    last.append(b);
  });
  kb.append(last);
  // a key press must not take the focus from the field being typed in (that would hide the keyboard)
  kb.addEventListener("pointerdown", (ev) => ev.preventDefault());
  kb.addEventListener("mousedown", (ev) => ev.preventDefault());
}
function hideKeyboard() {
  $("keyboard").hidden = true;
  if (keyboardTarget) keyboardTarget.blur();
  keyboardTarget = null;
}
buildKeyboard();
["instruction", "task-goal", "log-name", "task-observation"].forEach((id) => {
  $(id).addEventListener("focus", () => {
    keyboardTarget = $(id);
    const kb = $("keyboard");
    $(id).insertAdjacentElement("afterend", kb);  // the keyboard follows the field being typed in
    kb.hidden = false;
  });
  // the keyboard shows only while a field has the focus; it goes a moment after the focus left, so that
  // the tap that took it (on Plan route, below the keyboard) lands before the buttons move up
  $(id).addEventListener("blur", () => {
    setTimeout(() => { if (keyboardTarget === $(id) && document.activeElement !== $(id)) hideKeyboard(); }, 300);
  });
});

command($("plan"), "Plan refused", async () => {
  hideKeyboard();
  say("message", "planning…");
  plan = null; showGo(false); disarmGo(); $("absent").hidden = true;
  try {
    plan = await post("/api/route/plan", { instruction: $("instruction").value, start: startNode });
  } catch (e) {
    say("message", ""); $("landmarks").innerHTML = "";
    $("screen-route").classList.remove("planned");
    throw e;
  }
  remember($("instruction").value);
  showPlan(plan);
  showGo(true);
});
command($("go"), "Go refused", async () => {
  const absent = absentLandmarks(plan);
  if (absent.length && !goArmed) {  // a landmark judged not in the map: a second tap confirms
    goArmed = true;
    $("go-label").textContent = "Confirm Go";
    $("go").classList.add("confirm");
    $("absent").textContent = `Not in the map: ${absent.join(", ")}. Tap Confirm Go to drive anyway.`;
    goTimer = setTimeout(() => {
      disarmGo();
      $("absent").textContent = `Not in the map: ${absent.join(", ")}. Go asks to confirm.`;
    }, CONFIRM_MS);
    return;
  }
  disarmGo();
  await post("/api/route/go", { plan_id: plan.id });
  say("message", "driving");
});
command($("stop"), "STOP failed", async () => showStatus(await post("/api/stop")));
command($("release"), "Release refused", async () => showStatus(await post("/api/release")));
command($("task-run"), "Run task refused", () => post("/api/task/run", { goal: $("task-goal").value }));
command($("task-stop"), "Stop task refused", () => post("/api/task/stop"));
async function answer(done) {
  await post("/api/task/answer", { id: Number($("task-question").dataset.id), done,
                                   observation: $("task-observation").value });
  $("task-observation").value = "";
}
command($("task-done"), "Answer refused", () => answer(true));
command($("task-failed"), "Answer refused", () => answer(false));
command($("learned-keep"), "Keep refused", () => post("/api/task/approve", { keep: true }));
command($("learned-drop"), "Discard refused", () => post("/api/task/approve", { keep: false }));
command($("rec-start"), "Start recording refused", () => post("/api/record/start", { name: $("log-name").value }));
command($("rec-stop"), "Stop recording refused", async () => {
  const r = await post("/api/record/stop");
  say("rec-message", `saved ${r.log}: ${r.frames} frames`);
});
command($("map-build"), "Build map refused",
        () => post("/api/map/build", { logs: [$("log-name").value], name: "current" }));
document.querySelectorAll(".tab").forEach((t) => t.onclick = () => {
  document.querySelectorAll(".tab, .screen").forEach((x) => x.classList.remove("active"));
  t.classList.add("active");
  $("screen-" + t.dataset.screen).classList.add("active");
  if (t.dataset.screen === "map") drawMap();
});
fetch("/api/map").then(async (r) => {
  const d = await r.json().catch(() => ({}));
  if (r.ok) {
    mapData = d;
    if (d.verified === false) {  // a format-1 map without content hashes, opened as the config allows
      say("map-hint", "UNVERIFIED map: no content hashes, a changed node would not be noticed. Rebuild it.");
      $("map-hint").classList.add("bad");
    }
  } else { mapError = d.error || `no map (HTTP ${r.status})`; say("map-hint", mapError); }
  drawMap();
});
connect();
