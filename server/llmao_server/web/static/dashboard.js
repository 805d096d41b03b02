// Filter the server table as you type (the form's ?q= does the same without script).
// The filter is applied once at start too: what was typed before this script ran (a slow
// page, a value the browser restored) filters the table as well.
"use strict";
const filter = document.getElementById("filter");

function applyFilter() {
  const query = filter.value.trim().toLowerCase();
  for (const group of document.querySelectorAll("tbody.provider")) {
    let shown = 0;
    for (const row of group.querySelectorAll("tr.server")) {
      row.hidden = query !== "" && !row.dataset.search.includes(query);
      if (!row.hidden) shown += 1;
    }
    group.hidden = shown === 0;
  }
}

if (filter) {
  filter.addEventListener("input", applyFilter);
  applyFilter();
}

// A form that says data-confirm (releasing a box's binding) asks before it is sent.
for (const form of document.querySelectorAll("form[data-confirm]")) {
  form.addEventListener("submit", (event) => {
    if (!window.confirm(form.dataset.confirm)) event.preventDefault();
  });
}
