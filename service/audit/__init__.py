"""The audit and admin use-cases (the `resplog` admin commands, the `/audit` view) over the
bundle's `Audit` ports, and their pure logic: verification, timelines, conversations and
the export file format."""
