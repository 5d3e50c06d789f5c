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
  document.addEventListener("DOMContentLoaded", function () { localise(document); guidance(); });
})();
