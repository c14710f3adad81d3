"""One module per schema revision, oldest first; a revision once released is never edited."""
