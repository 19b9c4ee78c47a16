"""Teams: the teams and their members (service), roles and the membership check (roles),
invitations (invites)."""
