# frozen_string_literal: true

# cvsm: the Ruby client for the cvsm secrets manager. Start with Cvsm::Client.
require_relative "cvsm/rules"
require_relative "cvsm/version"
require_relative "cvsm/errors"
require_relative "cvsm/redaction"
require_relative "cvsm/e2e"
require_relative "cvsm/proxy"
require_relative "cvsm/configuration"
require_relative "cvsm/cache"
require_relative "cvsm/stale_read"
require_relative "cvsm/transport"
require_relative "cvsm/live"
require_relative "cvsm/client"
