"""Billing through Stripe (`CVSM_BILLING=stripe`, docs/billing.md): a team Owner pays for a plan
with a Checkout Session, manages it in the Customer Portal, and Stripe's webhooks decide the
team's plan from the subscription's current state.

- `rules`: what a subscription's state means for the team's plan (pure, no I/O);
- `queries`: the SQL (`team_billing`, `billing_events`, the plan change itself);
- `service`: the domain functions (explicit actor and connection), which call Stripe through
- `stripe_api`: the one module that talks to Stripe.
"""
