"""The HTTP API's routes: one module per area, each exposing ``router`` (a FastAPI
``APIRouter``). :data:`memlane.service.app.ROUTERS` lists the modules the app includes."""
