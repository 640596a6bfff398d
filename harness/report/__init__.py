"""Reports: Allure labels, steps, attachments, categories and environment (``allure``), the
offline HTML report builder (``builder``), and the benchmarks' target verdicts by interval
(``targets``). See docs/reports.md."""
