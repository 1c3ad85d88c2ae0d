"""Environment suites: the interface (``base``), the built-in suites, and the installed set
(``installed``: built-in plus plugins)."""
