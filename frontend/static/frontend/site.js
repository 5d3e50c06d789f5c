// Times are rendered in UTC inside <time datetime>; show them in the viewer's own time zone instead.
(function () {
  function localise(root) {
    var fmt = new Intl.DateTimeFormat(undefined, {
      year: "numeric", month: "short", day: "2-digit", hour: "2-digit", minute: "2-digit"
    });
    root.querySelectorAll("time[datetime]").forEach(function (el) {
      var d = new Date(el.getAttribute("datetime"));
      if (!isNaN(d)) { el.title = el.textContent; el.textContent = fmt.format(d); }
    });
  }
  // The bid guidance beside the submit form: ask the server (one place computes it) as the inputs change.
  function guidance() {
    var form = document.querySelector("form[data-guidance]");
    if (!form) { return; }
    var box = document.getElementById("guidance");
    var timer = null;
    function ask() {
      var params = new URLSearchParams();
      form.querySelectorAll("[data-guide]").forEach(function (el) { params.append(el.name, el.value); });
      fetch(form.dataset.guidance + "?" + params.toString(), {credentials: "same-origin"})
        .then(function (r) { return r.ok ? r.text() : ""; })
        .then(function (html) { if (html) { box.innerHTML = html; } });
    }
    form.addEventListener("input", function () { clearTimeout(timer); timer = setTimeout(ask, 300); });
  }
  // The runtime prediction, cost and start estimate beside the submit form, as the user types. The server
  // answers JSON (frontend.views.jobs.estimate); the text goes in with textContent, never as HTML.
  function estimate() {
    var form = document.querySelector("form[data-estimate]");
    if (!form) { return; }
    var box = document.getElementById("prediction");
    var timer = null, asked = 0;
    function line(text, field) {
      var p = document.createElement("p");
      p.textContent = text;
      p.dataset.field = field;
      return p;
    }
    function show(data) {
      var parts = [line(data.prediction_text, "prediction")];
      if (data.cost_text) { parts.push(line(data.cost_text, "cost")); }
      if (data.warning) {
        var warn = line(data.warning, "warning");
        warn.className = "error";
        warn.setAttribute("role", "alert");
        parts.push(warn);
      }
      if (data.starts && data.starts.length) {
        var h = document.createElement("h3");
        h.textContent = "Estimated start";
        var ul = document.createElement("ul");
        ul.className = "plain";
        ul.dataset.field = "starts";
        data.starts.forEach(function (s) {
          var li = document.createElement("li");
          var b = document.createElement("strong");
          b.textContent = s.gpu_type;
          li.appendChild(b);
          li.appendChild(document.createTextNode(": " + s.text));
          li.dataset.type = s.gpu_type;
          ul.appendChild(li);
        });
        parts.push(h, ul);
      }
      if (data.speeds) { parts.push.apply(parts, speedTable(data.speeds)); }
      box.replaceChildren.apply(box, parts);
    }
    // Per GPU type: speed against the first choice, runtime, cost at the posted price, the limit that pays
    // the same per unit of work, and what the speed rests on (frontend/speed_cells.py makes the strings).
    function speedTable(speeds) {
      var h = document.createElement("h3");
      h.textContent = "Per GPU type (speeds against " + speeds.reference + ")";
      var table = document.createElement("table");
      table.className = "data";
      table.dataset.field = "speeds";
      var head = table.createTHead().insertRow();
      ["Type", "Speed", "Runtime", "Cost now", "Same-work limit", "Basis"].forEach(function (t) {
        var th = document.createElement("th");
        th.scope = "col";
        th.textContent = t;
        head.appendChild(th);
      });
      var body = table.createTBody();
      speeds.rows.forEach(function (r) {
        var tr = body.insertRow();
        tr.dataset.type = r.gpu_type;
        tr.title = r.text;
        var th = document.createElement("th");
        th.scope = "row";
        th.textContent = r.gpu_type;
        tr.appendChild(th);
        ["speed", "runtime", "cost", "limit", "basis"].forEach(function (k) {
          var td = tr.insertCell();
          td.textContent = r[k];
          td.dataset.field = k;
        });
      });
      return [h, line(speeds.text, "speeds-text"), table];
    }
    function ask() {
      var params = new URLSearchParams();
      form.querySelectorAll("[data-estimate-input], [data-guide]").forEach(function (el) {
        params.append(el.name, el.value);
      });
      var mine = ++asked;  // an older answer arriving late must not replace a newer one
      fetch(form.dataset.estimate + "?" + params.toString(), {credentials: "same-origin"})
        .then(function (r) { return r.ok ? r.json() : null; })
        .then(function (data) { if (data && mine === asked) { show(data); } });
    }
    form.addEventListener("input", function () { clearTimeout(timer); timer = setTimeout(ask, 300); });
    if (form.querySelector("#id_name").value || form.querySelector("#id_command").value) { ask(); }
  }
  document.addEventListener("DOMContentLoaded", function () {
    localise(document); guidance(); estimate();
  });
})();
