"""The dashboard's pages, one module per area, on the kit in `kit`."""
