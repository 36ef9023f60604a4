/* Holdpoint dashboard behaviour. Loaded as a file (CSP: script-src 'self'); no inline handlers.
 * - copy buttons: <button data-copy="text" hidden> is shown once this script runs;
 * - relative times (<time data-rel>) and countdowns (<time data-countdown>) keep ticking
 *   between htmx polls. Everything here is an enhancement: the pages work without it. */
(function () {
  "use strict";

  function span(seconds) {
    seconds = Math.floor(Math.abs(seconds));
    if (seconds < 60) return seconds + "s";
    var minutes = Math.floor(seconds / 60);
    if (minutes < 60) return minutes + " min";
    var hours = Math.floor(minutes / 60);
    minutes = minutes % 60;
    if (hours < 24) return minutes ? hours + " h " + minutes + " min" : hours + " h";
    var days = Math.floor(hours / 24);
    hours = hours % 24;
    return hours ? days + " d " + hours + " h" : days + " d";
  }

  function tick() {
    var now = Date.now();
    document.querySelectorAll("time[data-rel]").forEach(function (el) {
      var delta = (Date.parse(el.getAttribute("datetime")) - now) / 1000;
      if (isNaN(delta)) return;
      el.textContent = Math.abs(delta) < 5 ? "just now" : delta > 0 ? "in " + span(delta) : span(delta) + " ago";
    });
    document.querySelectorAll("time[data-countdown]").forEach(function (el) {
      var delta = (Date.parse(el.getAttribute("datetime")) - now) / 1000;
      if (isNaN(delta)) return;
      var overdue = delta <= 0;
      el.textContent = overdue ? "overdue " + span(delta) : span(delta) + " left";
      el.classList.toggle("overdue", overdue);
      el.classList.toggle("soon", !overdue && delta < 300);
    });
  }

  function reveal(root) {
    (root || document).querySelectorAll("button[data-copy][hidden]").forEach(function (button) {
      button.hidden = false;
    });
  }

  function copyText(text) {
    if (navigator.clipboard && window.isSecureContext) {
      return navigator.clipboard.writeText(text);
    }
    return new Promise(function (resolve, reject) {
      var area = document.createElement("textarea");
      area.value = text;
      area.setAttribute("readonly", "");
      area.className = "offscreen";
      document.body.appendChild(area);
      area.select();
      var ok = false;
      try { ok = document.execCommand("copy"); } catch (error) { ok = false; }
      document.body.removeChild(area);
      if (ok) { resolve(); } else { reject(new Error("copy refused")); }
    });
  }

  function say(button, text) {
    var label = button.dataset.label || button.textContent;
    button.dataset.label = label;
    button.textContent = text;
    window.setTimeout(function () { button.textContent = label; }, 1600);
  }

  document.addEventListener("click", function (event) {
    var button = event.target.closest && event.target.closest("button[data-copy]");
    if (!button) return;
    copyText(button.dataset.copy).then(
      function () { say(button, "Copied"); },
      function () { say(button, "Select it and copy"); }
    );
  });

  // htmx swaps nothing on an error answer; say so instead of failing silently.
  function problem(text, kind) {
    var main = document.getElementById("main");
    if (!main) return;
    var box = document.getElementById("htmx-problem");
    if (!box) {
      box = document.createElement("p");
      box.id = "htmx-problem";
      box.className = "notice notice-error";
      box.setAttribute("role", "alert");
      main.insertBefore(box, main.firstChild);
    }
    box.textContent = text;
    box.dataset.kind = kind;
  }
  function clearProblem() {
    var box = document.getElementById("htmx-problem");
    if (box && box.dataset.kind === "network") box.remove();
  }
  document.addEventListener("htmx:responseError", function (event) {
    var status = event.detail.xhr ? event.detail.xhr.status : 0;
    var why = status === 403 ? "You are not allowed to do that."
      : status === 404 ? "This page no longer exists, or is not yours to see."
      : "The server could not answer (HTTP " + status + ").";
    problem(why + " Reload the page to see where things stand.", "answer");
  });
  document.addEventListener("htmx:sendError", function () {
    problem("Holdpoint cannot be reached; the page will update again once it can.", "network");
  });
  document.addEventListener("htmx:afterRequest", function (event) {
    if (event.detail.successful) clearProblem();
  });

  document.addEventListener("DOMContentLoaded", function () { reveal(document); tick(); });
  document.addEventListener("htmx:load", function (event) { reveal(event.target); });
  window.setInterval(tick, 1000);
})();
