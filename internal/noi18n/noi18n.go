// Package noi18n, imported (blank) by the nodeexec binary before anything
// else, keeps kubectl's packages from loading their message translations:
// nodeexec links kubectl's debug package for its profiles but never shows
// kubectl's help texts, and the load (unzipping the catalogue at the first
// i18n.T, which runs in a package initializer of k8s.io/kubectl/pkg/cmd)
// costs about 16 ms and 4 MB at every start of the CLI and of every agent
// process. It uses the hook kubectl documents for this,
// i18n.SetLoadTranslationsFunc; i18n.T then returns its English text.
package noi18n

import "k8s.io/kubectl/pkg/util/i18n"

func init() {
	// The error is "already loaded": then there is nothing to save.
	_ = i18n.SetLoadTranslationsFunc(func() error { return nil })
}
