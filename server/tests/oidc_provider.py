"""A real OpenID Connect provider for the tests, on a local port: authlib's server components
(`AuthorizationServer`, `AuthorizationCodeGrant`, `OpenIDCode`, `CodeChallenge`) on werkzeug, in
a thread, with its own RSA key, JWKS and discovery document.

Consent is automatic for `OpenIDProvider.user` (sub, email, email_verified, name). Knobs make it
misbehave the way a test needs: `deny` (answers `error=access_denied`), `id_token_nonce` (signs an
ID token with another nonce), `signing_key` (signs with a key its JWKS does not publish),
`discovery_overrides` (changes its discovery document).

The same server is also a test double of GitHub's three endpoints (`/login/oauth/authorize`,
`/login/oauth/access_token`, `/api/user` and `/api/user/emails`), since GitHub itself cannot be
reached from the tests: the flow is the same authorization-code grant with PKCE, without an ID
token, and the user's addresses come from `github_emails`.
"""

from __future__ import annotations

import json
import secrets
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from authlib.oauth2 import AuthorizationServer
from authlib.oauth2.rfc6749 import (ClientMixin, JsonPayload, JsonRequest, OAuth2Payload,
                                    OAuth2Request, grants)
from authlib.oauth2.rfc6750 import BearerTokenGenerator
from authlib.oauth2.rfc7636 import CodeChallenge
from authlib.oidc.core import UserInfo
from authlib.oidc.core.grants import OpenIDCode
from joserfc.jwk import KeySet, RSAKey
from werkzeug.serving import WSGIRequestHandler, make_server
from werkzeug.wrappers import Request, Response

from smtpbox import free_port

KID = "op-key-1"


@dataclass
class ProviderUser:
    """The person who consents at the provider."""

    sub: str = "op-user-1"
    email: str = "person@example.org"
    email_verified: bool = True
    name: str = "Person Example"
    github_id: int = 4242
    # GitHub's /user/emails; None: the one address above, primary, verified as `email_verified`.
    github_emails: list[dict] | None = None


@dataclass
class Client(ClientMixin):
    client_id: str
    client_secret: str

    def get_client_id(self) -> str:
        return self.client_id

    def get_default_redirect_uri(self) -> None:
        return None

    def get_allowed_scope(self, scope: str) -> str:
        return scope

    def check_redirect_uri(self, redirect_uri: str) -> bool:
        # The app's address is known only once it listens: any loopback callback is registered.
        return redirect_uri.startswith("http://127.0.0.1:") and "/api/v1/auth/" in redirect_uri

    def check_client_secret(self, client_secret: str) -> bool:
        return secrets.compare_digest(client_secret, self.client_secret)

    def check_endpoint_auth_method(self, method: str, endpoint: str) -> bool:
        return method in ("client_secret_basic", "client_secret_post")

    def check_response_type(self, response_type: str) -> bool:
        return response_type == "code"

    def check_grant_type(self, grant_type: str) -> bool:
        return grant_type == "authorization_code"


@dataclass
class AuthorizationCode:
    code: str
    client_id: str
    redirect_uri: str
    scope: str
    nonce: str | None
    code_challenge: str | None
    code_challenge_method: str | None
    user: ProviderUser
    auth_time: int = field(default_factory=lambda: int(time.time()))

    def get_redirect_uri(self) -> str:
        return self.redirect_uri

    def get_scope(self) -> str:
        return self.scope

    def get_nonce(self) -> str | None:
        return self.nonce

    def get_auth_time(self) -> int:
        return self.auth_time

    def get_acr(self) -> None:
        return None

    def get_amr(self) -> None:
        return None


class _Payload(OAuth2Payload):
    def __init__(self, request: Request) -> None:
        self._request = request

    @property
    def data(self) -> Any:
        return self._request.values

    @cached_property
    def datalist(self) -> Any:
        values: defaultdict[str, list] = defaultdict(list)
        for key in self.data:
            values[key].extend(self.data.getlist(key))
        return values


class _Request(OAuth2Request):
    def __init__(self, request: Request) -> None:
        super().__init__(method=request.method, uri=request.url, headers=request.headers)
        self._request = request
        self.payload = _Payload(request)

    @property
    def args(self) -> Any:
        return self._request.args

    @property
    def form(self) -> Any:
        return self._request.form


class _JsonPayload(JsonPayload):
    def __init__(self, request: Request) -> None:
        self._request = request

    @property
    def data(self) -> Any:
        return self._request.get_json()


class _QuietHandler(WSGIRequestHandler):
    def log_request(self, *args: Any, **kwargs: Any) -> None:
        pass  # a request line would show the state and the code to the log tests


class OpenIDProvider:
    """The provider: `start()` serves it on 127.0.0.1; `issuer` is its base URL."""

    def __init__(self, client_id: str = "cvsm-test-client",
                 client_secret: str = "cvsm-test-client-secret") -> None:
        self.port = free_port()
        self.issuer = f"http://127.0.0.1:{self.port}"
        self.client = Client(client_id, client_secret)
        self.key = RSAKey.generate_key(2048, parameters={"kid": KID, "use": "sig", "alg": "RS256"})
        self.user = ProviderUser()
        self.deny = False
        self.id_token_nonce: str | None = None
        self.signing_key: RSAKey | None = None
        self.discovery_overrides: dict[str, Any] = {}
        self.codes: dict[str, AuthorizationCode] = {}
        self.tokens: dict[str, ProviderUser] = {}
        self.token_requests = 0
        self.lock = threading.Lock()
        self.server = self._authorization_server()
        self._http = None
        self._thread: threading.Thread | None = None

    # authlib's server, wired to this object's state ---------------------------------------

    def _authorization_server(self) -> AuthorizationServer:
        provider = self

        class Server(AuthorizationServer):
            def query_client(self, client_id: str) -> Client | None:
                return provider.client if client_id == provider.client.client_id else None

            def save_token(self, token: dict, request: OAuth2Request) -> None:
                with provider.lock:
                    provider.tokens[token["access_token"]] = request.user

            def create_oauth2_request(self, request: Any) -> OAuth2Request:
                return request if isinstance(request, OAuth2Request) else _Request(request)

            def create_json_request(self, request: Request) -> JsonRequest:
                json_request = JsonRequest(request.method, request.url, request.headers)
                json_request.payload = _JsonPayload(request)
                return json_request

            def handle_response(self, status: int, body: Any, headers: Any) -> Response:
                if isinstance(body, dict):
                    body = json.dumps(body)
                return Response(body, status=status, headers=headers)

            def send_signal(self, name: str, *args: Any, **kwargs: Any) -> None:
                pass

        class CodeGrant(grants.AuthorizationCodeGrant):
            TOKEN_ENDPOINT_AUTH_METHODS = ["client_secret_basic", "client_secret_post"]

            def save_authorization_code(self, code: str, request: OAuth2Request) -> None:
                data = request.payload.data
                with provider.lock:
                    provider.codes[code] = AuthorizationCode(
                        code=code, client_id=request.client.client_id,
                        redirect_uri=data.get("redirect_uri"), scope=data.get("scope", ""),
                        nonce=data.get("nonce"), code_challenge=data.get("code_challenge"),
                        code_challenge_method=data.get("code_challenge_method"), user=request.user)

            def query_authorization_code(self, code: str, client: Client) -> AuthorizationCode | None:
                found = provider.codes.get(code)
                return found if found is not None and found.client_id == client.client_id else None

            def delete_authorization_code(self, authorization_code: AuthorizationCode) -> None:
                with provider.lock:
                    provider.codes.pop(authorization_code.code, None)

            def authenticate_user(self, authorization_code: AuthorizationCode) -> ProviderUser:
                return authorization_code.user

        class IdToken(OpenIDCode):
            def exists_nonce(self, nonce: str, request: OAuth2Request) -> bool:
                return False

            def resolve_client_private_key(self, client: Client) -> RSAKey:
                return provider.signing_key or provider.key

            def get_client_algorithm(self, client: Client) -> str:
                return "RS256"

            def get_encode_header(self, client: Client) -> dict:
                return {"alg": "RS256", "kid": KID}

            def get_client_claims(self, client: Client) -> dict:
                return {"iss": provider.issuer, "aud": [client.client_id]}

            def get_authorization_code_claims(self, authorization_code: AuthorizationCode) -> dict:
                claims = super().get_authorization_code_claims(authorization_code)
                if provider.id_token_nonce is not None:
                    claims["nonce"] = provider.id_token_nonce
                return claims

            def generate_user_info(self, user: ProviderUser, scope: str) -> UserInfo:
                return UserInfo(sub=user.sub, email=user.email, email_verified=user.email_verified,
                                name=user.name)

        server = Server()
        server.register_token_generator(
            "default", BearerTokenGenerator(lambda **_: secrets.token_urlsafe(32)))
        server.register_grant(CodeGrant, [IdToken(require_nonce=True), CodeChallenge(required=True)])
        return server

    # HTTP ----------------------------------------------------------------------------------

    def discovery(self) -> dict:
        return {
            "issuer": self.issuer,
            "authorization_endpoint": f"{self.issuer}/authorize",
            "token_endpoint": f"{self.issuer}/token",
            "userinfo_endpoint": f"{self.issuer}/userinfo",
            "jwks_uri": f"{self.issuer}/jwks",
            "response_types_supported": ["code"],
            "subject_types_supported": ["public"],
            "id_token_signing_alg_values_supported": ["RS256"],
            "code_challenge_methods_supported": ["S256"],
            "token_endpoint_auth_methods_supported": ["client_secret_basic", "client_secret_post"],
            "scopes_supported": ["openid", "email", "profile"],
            **self.discovery_overrides,
        }

    def _authorize(self, request: Request) -> Response:
        grant = self.server.get_consent_grant(request, end_user=self.user)
        return self.server.create_authorization_response(
            request, grant_user=None if self.deny else self.user, grant=grant)

    def _bearer_user(self, request: Request) -> ProviderUser | None:
        scheme, _, token = request.headers.get("Authorization", "").partition(" ")
        return self.tokens.get(token) if scheme.lower() in ("bearer", "token") else None

    def wsgi(self, environ: dict, start_response: Any) -> Any:
        request = Request(environ)
        path = request.path
        if path == "/.well-known/openid-configuration":
            response = Response(json.dumps(self.discovery()), content_type="application/json")
        elif path == "/jwks":
            public = KeySet([self.key]).as_dict(private=False)
            response = Response(json.dumps(public), content_type="application/json")
        elif path in ("/authorize", "/login/oauth/authorize"):
            response = self._authorize(request)
        elif path in ("/token", "/login/oauth/access_token") and request.method == "POST":
            self.token_requests += 1
            response = self.server.create_token_response(request)
        elif path in ("/userinfo", "/api/user", "/api/user/emails"):
            user = self._bearer_user(request)
            if user is None:
                response = Response('{"message": "Bad credentials"}', status=401,
                                    content_type="application/json")
            elif path == "/userinfo":
                body = {"sub": user.sub, "email": user.email, "email_verified": user.email_verified}
                response = Response(json.dumps(body), content_type="application/json")
            elif path == "/api/user":
                body = {"id": user.github_id, "login": user.email.split("@")[0], "name": user.name}
                response = Response(json.dumps(body), content_type="application/json")
            else:
                emails = user.github_emails if user.github_emails is not None else [
                    {"email": user.email, "primary": True, "verified": user.email_verified,
                     "visibility": "private"}]
                response = Response(json.dumps(emails), content_type="application/json")
        else:
            response = Response("not found", status=404)
        return response(environ, start_response)

    def start(self) -> OpenIDProvider:
        self._http = make_server("127.0.0.1", self.port, self.wsgi, threaded=True,
                                 request_handler=_QuietHandler)
        self._thread = threading.Thread(target=self._http.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._http is not None:
            self._http.shutdown()
            self._http.server_close()
            self._http = None

    def other_key(self) -> RSAKey:
        """A key with this provider's key id that its JWKS does not publish."""
        return RSAKey.generate_key(2048, parameters={"kid": KID, "use": "sig", "alg": "RS256"})
