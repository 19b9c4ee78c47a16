"""The support assistant: help articles, conversations and tickets."""
