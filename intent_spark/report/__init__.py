"""The report: reads the small result tables and files, draws and writes HTML, Markdown and CSV.
It computes no statistics."""
