"""The acr suites."""
