"""Audit reads of the log for the admin CLI: verification, timelines, conversations and the
export file format. Pure: the composition root feeds them rows it read through the store."""
