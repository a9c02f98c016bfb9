// The status page's live updates (templates/ops/status.html): a file under
// /static/, not an inline script, so the page runs under script-src 'self'.
(function () {
  function get(data, path) {
    return path.split(".").reduce(function (node, key) { return node == null ? null : node[key]; }, data);
  }
  function cell(text, tag) { var el = document.createElement(tag || "td"); el.textContent = text; return el; }
  function rows(table, items, columns) {
    var body = table.tBodies[0] || table;
    body.replaceChildren();
    items.forEach(function (item) {
      var tr = document.createElement("tr");
      columns.forEach(function (col, i) { tr.appendChild(cell(item[col], i === 0 && table.dataset.map ? "th" : "td")); });
      body.appendChild(tr);
    });
  }
  function render(data) {
    document.querySelectorAll("[data-field]").forEach(function (el) {
      var value = get(data, el.dataset.field);
      el.textContent = value === null || value === undefined ? "" : String(value);
    });
    document.querySelectorAll("table[data-map]").forEach(function (table) {
      var map = data[table.dataset.map] || {};
      rows(table, Object.keys(map).map(function (k) { return {k: k, n: map[k]}; }), ["k", "n"]);
    });
    rows(document.getElementById("ops-errors"), data.errors, ["rel_path", "reason"]);
    rows(document.getElementById("ops-sessions"), data.sessions.recent, ["client", "protocol_version", "opened", "last_seen"]);
    var pay = data.payments;
    var outcomes = Object.keys(pay.by_outcome).map(function (k) { return " " + k + "=" + pay.by_outcome[k]; });
    document.getElementById("ops-payments-total").textContent =
      pay.total + " events" + (outcomes.length ? ":" + outcomes.join("") : "");
    rows(document.getElementById("ops-payments"), pay.rows.map(function (p) {
      return {outcome: p.outcome, tool: p.tool, count: p.count, amount: p.amount + " " + p.unit};
    }), ["outcome", "tool", "count", "amount"]);
  }
  var state = document.getElementById("ops-connection");
  var source = new EventSource(state.dataset.stream);
  source.addEventListener("status", function (event) {
    render(JSON.parse(event.data));
    state.textContent = "updated " + new Date().toLocaleTimeString();
  });
  source.onerror = function () { state.textContent = "reconnecting…"; };
})();
