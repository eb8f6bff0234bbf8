// The console's one script: the time slider of a recorded run, and live
// events on a live control plane. Pages are complete without it.
"use strict";
(function () {
  function clock(seconds) {
    var s = Math.round(seconds), h = Math.floor(s / 3600), m = Math.floor((s % 3600) / 60), r = s % 60;
    var pad = function (n) { return (n < 10 ? "0" : "") + n; };
    return "t = " + (h ? h + ":" + pad(m) + ":" + pad(r) : m + ":" + pad(r));
  }
  var slider = document.getElementById("at");
  if (slider) {
    var label = document.getElementById("at-label");
    slider.addEventListener("input", function () { label.textContent = clock(Number(slider.value)); });
    slider.addEventListener("change", function () { document.getElementById("slider").submit(); });
  }
  var table = document.querySelector("table[data-stream]");
  if (!table || !window.EventSource) { return; }
  var kinds = (table.getAttribute("data-kinds") || "").split(",").filter(Boolean);
  var body = table.querySelector("tbody");
  var state = document.getElementById("live-state");
  var source = new EventSource(table.getAttribute("data-stream"));
  function cell(text) { var td = document.createElement("td"); td.textContent = text; return td; }
  function add(kind, e) {
    if (kinds.length && kinds.indexOf(kind) < 0) { return; }
    var none = body.querySelector("tr.none");
    if (none) { none.remove(); }
    var tr = document.createElement("tr");
    tr.className = "new";
    tr.setAttribute("data-kind", kind);
    tr.appendChild(cell(new Date(e.t * 1000).toLocaleString()));
    var k = cell(""); var span = document.createElement("span");
    span.className = "kind " + kind; span.textContent = kind; k.appendChild(span); tr.appendChild(k);
    var t = cell("");
    if (e.task) { var a = document.createElement("a"); a.href = "/tasks/" + e.task; a.textContent = e.task; t.appendChild(a); }
    tr.appendChild(t);
    tr.appendChild(cell(kind === "migrated" ? (e.from || "") + " → " + (e.to || "") :
      (e.node || (e.between ? e.between.join(" – ") : ""))));
    var details = [];
    ["bytes", "downtime_s", "cause", "by", "reason"].forEach(function (f) { if (e[f] !== undefined) { details.push(f + " " + e[f]); } });
    tr.appendChild(cell(details.join("  ")));
    body.insertBefore(tr, body.firstChild);
    while (body.rows.length > 500) { body.deleteRow(body.rows.length - 1); }
  }
  (kinds.length ? kinds : []).forEach(function (kind) {
    source.addEventListener(kind, function (m) { add(kind, JSON.parse(m.data)); });
  });
  source.onopen = function () { if (state) { state.textContent = "live"; } };
  source.onerror = function () { if (state) { state.textContent = "reconnecting…"; } };
}());
