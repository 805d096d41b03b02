// Filter the server table as you type (the form's ?q= does the same without script).
"use strict";
const filter = document.getElementById("filter");
if (filter) {
  filter.addEventListener("input", () => {
    const query = filter.value.trim().toLowerCase();
    for (const group of document.querySelectorAll("tbody.provider")) {
      let shown = 0;
      for (const row of group.querySelectorAll("tr.server")) {
        row.hidden = query !== "" && !row.dataset.search.includes(query);
        if (!row.hidden) shown += 1;
      }
      group.hidden = shown === 0;
    }
  });
}
