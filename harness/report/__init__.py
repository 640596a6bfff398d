"""Reports: Allure labels, steps, attachments, categories and environment (``allure``) and the
offline HTML report builder (``builder``). See docs/reports.md."""
