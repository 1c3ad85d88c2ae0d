"""The API's routers."""
